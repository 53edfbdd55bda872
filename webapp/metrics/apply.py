"""Applying validated contract messages to the database: runs, events, points, rewinds. One call per batch.

Everything here is idempotent when replayed (ingest may see an entry again after a crash before XACK): points are
upserts on (series, step), run fields are overwritten, and events are keyed by the stream entry id.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable

from django.utils import timezone

from observatory import contract
from observatory.downsample import classify
from webapp.live.push import LiveDelta
from webapp.metrics import storage
from webapp.metrics.models import Series
from webapp.runs.models import ENDED_STATES, Health, Run, RunEvent, from_unix, json_clean


def apply_messages(items: Iterable[tuple[str, contract.Message]]) -> dict[str, LiveDelta]:
    """(stream entry id, message) pairs in stream order -> the live delta per run. Call inside atomic()."""
    by_run: dict[str, list[tuple[str, contract.Message]]] = defaultdict(list)
    for entry_id, msg in items:
        by_run[msg.run].append((entry_id, msg))
    writer = storage.SeriesWriter()
    deltas = {run_id: _apply_run(run_id, msgs, writer) for run_id, msgs in by_run.items()}
    writer.flush()
    return deltas


def _apply_run(run_id: str, msgs: list[tuple[str, contract.Message]], writer: storage.SeriesWriter) -> LiveDelta:
    run = Run.objects.filter(pk=run_id).first()
    if run is None:
        run = Run.objects.create(id=run_id, name=run_id)
    delta = LiveDelta()
    names = {n for _, m in msgs if m.kind == "metrics" for n in m.data["values"]}
    known = set(Series.objects.filter(run_id=run_id, name__in=names).values_list("name", flat=True))
    sids = storage.series_ids(run_id, names)
    delta.new_series = names - known
    evented = [e for e, m in msgs if m.kind in ("state", "event", "rewind")]
    seen_events = set(RunEvent.objects.filter(run=run, entry_id__in=evented).values_list("entry_id", flat=True)
                      ) if evented else set()
    for entry_id, msg in msgs:
        d = msg.data
        kind = msg.kind
        if kind == "metrics":
            step = d["step"]
            for name, x in d["values"].items():
                writer.add(sids[name], step, x)
                delta.add_point(name, step, *classify(x))
            run.last_step = step if run.last_step is None else max(run.last_step, step)
        elif kind == "heartbeat":
            run.phase = d["phase"]
            run.heartbeat = json_clean({k: v for k, v in d.items() if k != "t"})
            run.last_heartbeat_at = from_unix(d["t"]) or timezone.now()
            if run.state not in ENDED_STATES:
                run.health = Health.ALIVE
            run.last_step = d["step"] if run.last_step is None else max(run.last_step, d["step"])
        elif kind == "state":
            run.state, run.state_detail = d["state"], str(d.get("detail", ""))[:10_000]
            run.health = Health.ENDED if run.state in ENDED_STATES else (
                Health.ALIVE if run.health == Health.ENDED else run.health)
            _event(run, entry_id, seen_events, delta, RunEvent.KIND_STATE, d["state"], d["step"], d["t"],
                   {"detail": run.state_detail})
        elif kind == "event":
            _event(run, entry_id, seen_events, delta, RunEvent.KIND_EVENT, d["name"], d["step"], d["t"],
                   d.get("payload") or {})
        elif kind == "rewind":
            all_sids = set(Series.objects.filter(run_id=run_id).values_list("id", flat=True)) | set(sids.values())
            writer.rewind(all_sids, d["to_step"])
            delta.rewind(d["from_step"], d["to_step"])
            if run.last_step is not None:
                run.last_step = min(run.last_step, d["to_step"])
            _event(run, entry_id, seen_events, delta, RunEvent.KIND_REWIND, "rewind", d["to_step"], d["t"],
                   {"from_step": d["from_step"], "to_step": d["to_step"]})
        elif kind == "run":
            run.name = d["name"][:200]
            run.config = json_clean(d["config"])
            run.started_at = from_unix(d.get("started_at")) or from_unix(d["t"]) or run.started_at
            run.source = "stream"
        elif kind == "manifest":
            run.manifest = json_clean(d["manifest"])
    run.updated_at = timezone.now()
    run.save()
    delta.run = run.summary()
    return delta


def _event(run, entry_id, seen, delta, kind, name, step, t, payload) -> None:
    if entry_id in seen:  # replay after a crash between commit and XACK
        return
    ev = RunEvent.objects.create(run=run, entry_id=entry_id, kind=kind, name=str(name)[:200], step=step,
                                 payload=json_clean(payload), t=from_unix(t))
    delta.events.append(ev.as_dict())
