"""Telemetry lost before ingest read it, as a critical anomaly in the run's log (an ingest hook, metrics.changes).

A producer that trims unread entries, or whose queue dropped some, puts a `telemetry_lost` event on the run's
stream (observatory.streams.trim) and counts them in contract.telemetry_lost_key. When ingest stores that event,
this hook opens a `telemetry_lost` anomaly, or updates the run's open one (one episode until an operator triages
it): its score is the run's count of entries lost so far, its explanation says how. Routed like any critical one.
"""

from __future__ import annotations

from django.db import transaction

from observatory import contract
from observatory.anomalies import CRITICAL, OPENED, UPDATED, Anomaly, Event
from webapp.anomalies import store
from webapp.anomalies.models import OPEN
from webapp.anomalies.models import Anomaly as Row
from webapp.runs.models import RunEvent

KIND, METRIC = contract.TELEMETRY_LOST_EVENT, "telemetry"


def committed(changes) -> list[tuple[str, dict]]:
    """The hook: a frame for each run whose batch held a telemetry_lost event."""
    frames = []
    for run_id, ch in changes.items():
        events = [e for e in ch.events if e.get("kind") == RunEvent.KIND_EVENT and e.get("name") == KIND]
        frame = record(run_id, events) if events else None
        if frame:
            frames.append((run_id, frame))
    return frames


def _totals(run_id: str, events: list[dict]) -> dict[str, int]:
    """Entries lost so far, by how: the run's counters in Redis, or the newest the events announced if higher."""
    from webapp.redis import get_redis

    totals = {k.decode(): int(v) for k, v in get_redis().hgetall(contract.telemetry_lost_key(run_id)).items()}
    for e in events:
        p = e.get("payload") or {}
        if isinstance(p.get("how"), str) and isinstance(p.get("total"), int):
            totals[p["how"]] = max(totals.get(p["how"], 0), p["total"])
    return totals


def _explain(totals: dict[str, int], why: str) -> str:
    parts = {"trimmed": "trimmed from Redis before ingest read them", "dropped": "dropped by the publisher's queue"}
    how = "; ".join(f"{n:,} {parts.get(k, k)}" for k, n in sorted(totals.items(), reverse=True) if n)
    return f"{sum(totals.values()):,} telemetry entries lost in all ({how}); latest: {why}"


def record(run_id: str, events: list[dict]) -> dict | None:
    """Open or update the run's telemetry_lost anomaly for these stored events; returns the live frame."""
    totals = _totals(run_id, events)
    step = max(e.get("step") or 0 for e in events)
    why = str((events[-1].get("payload") or {}).get("why", ""))[:300]
    changed = store.Changed(run_id)
    with transaction.atomic():
        row = Row.objects.filter(run_id=run_id, kind=KIND, superseded=False, status=OPEN).order_by("-start_step") \
            .first()
        start = row.start_step if row is not None else step
        a = Anomaly(KIND, METRIC, start, max(step, start), max(step, start), CRITICAL, float(sum(totals.values())),
                    _explain(totals, why))
        store.apply_events(run_id, [Event(UPDATED if row is not None else OPENED, a, step)], changed)
        store.route_escalations(changed)
    return changed.frame()
