"""Detector events -> Anomaly rows: upsert on the episode's key, supersede on rewinds, route new severities.

Called inside the transaction that also saves the run's detector state, so the rows and the state that produced
them commit together; replaying a batch (ingest re-delivers after a crash) finds the same keys and changes nothing.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from observatory.anomalies import SUPERSEDED
from observatory.anomalies.model import RANK
from webapp.anomalies.models import Anomaly

FRAME_TYPE = "anomaly"  # the live frame (webapp/live/protocol.py)


class Changed:
    """What one batch did to a run's log: rows in the order they changed, and each one's last action."""

    def __init__(self, run_id: str):
        self.run_id = run_id
        self.rows: dict[int, Anomaly] = {}
        self.actions: dict[int, str] = {}
        self.escalated: list[Anomaly] = []  # new severities to route (notifications)

    def note(self, row: Anomaly, action: str) -> None:
        self.rows.pop(row.id, None)
        self.rows[row.id] = row
        # "opened" wins over a later update/close of the same row in one batch: the browser toasts new ones
        if self.actions.get(row.id) != "opened" or action == SUPERSEDED:
            self.actions[row.id] = action

    def frame(self) -> dict | None:
        if not self.rows:
            return None
        return {"type": FRAME_TYPE, "run_id": self.run_id, "anomalies": [{**row.as_json(), "event": self.actions[i]}
                                                  for i, row in self.rows.items()]}


def supersede_after(run_id: str, to_step: int, changed: Changed) -> None:
    """A rewind to `to_step`: every live anomaly of the run that began after it was found on replaced points."""
    rows = list(Anomaly.objects.filter(run_id=run_id, superseded=False, start_step__gt=to_step))
    if not rows:
        return
    now = timezone.now()
    Anomaly.objects.filter(id__in=[r.id for r in rows]).update(superseded=True, updated_at=now)
    for row in rows:
        row.superseded, row.updated_at = True, now
        changed.note(row, SUPERSEDED)


def apply_events(run_id: str, events, changed: Changed) -> None:
    """Upsert each event's anomaly (Monitor events: opened/updated/closed/superseded, in order)."""
    if not events:
        return
    keys = {e.anomaly.key for e in events}
    live = {a.key: a for a in Anomaly.objects.filter(run_id=run_id, superseded=False, key__in=keys)}
    for ev in events:
        a = ev.anomaly
        row = live.get(a.key)
        if ev.action == SUPERSEDED:
            if row is not None:  # (supersede_after usually got there first)
                row.superseded, row.updated_at = True, timezone.now()
                row.save(update_fields=["superseded", "updated_at"])
                del live[a.key]
                changed.note(row, SUPERSEDED)
            continue
        created = row is None
        if created:
            row = Anomaly(run_id=run_id, key=a.key[:300], detected_step=ev.at)
        before = (row.peak_step, row.end_step, row.severity, row.score, row.explanation) if not created else None
        row.set_from(a)
        if not created and before == (row.peak_step, row.end_step, row.severity, row.score, row.explanation):
            continue  # a replayed event: nothing new
        if RANK[row.severity] > RANK.get(row.notified_severity, -1):
            row.notified_severity = row.severity
            changed.escalated.append(row)
        row.save()
        live[a.key] = row
        changed.note(row, "opened" if created else ev.action)


def route_escalations(changed: Changed) -> None:
    """Deliveries for anomalies that reached a new severity, sent by Celery after the transaction commits."""
    if not changed.escalated:
        return
    from webapp.anomalies import notify  # (the mail and HTTP machinery only when something is routed)

    for row in changed.escalated:
        for delivery_id in notify.plan(row):
            transaction.on_commit(lambda d=delivery_id: notify.enqueue(d))
