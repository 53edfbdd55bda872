"""Server-side live push: what ingest changed (metrics' RunChanges), coalesced to <= 1 message per run per
interval, appended as "update" frames (webapp.live.protocol) to the run's live log (webapp.live.livelog), the one
ordered source of every live channel: the hub (webapp.live.hub) and the relay (webapp.live.relay, the only thing that
posts to the push tier) read it. Appending is one Redis script on the caller's thread: ingest never waits on the push
tier, and an append that fails raises (ingest leaves the batch unacknowledged, so it is replayed and appended).

Ingest appends through LivePublisher; a one-off push (a Celery task) uses push_now; apps before live in the chain
(annotations: references only) use send_frame through runs.extensions.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

import redis

from webapp.live import livelog
from webapp.live.protocol import frame_of, update_body
from webapp.metrics.changes import RunChanges

log = logging.getLogger("observatory.live")


class LivePublisher:
    """Appends a run's messages to its live log (ingest: `manage.py ingest`)."""

    def __init__(self, client: redis.Redis | None = None):
        self.log = livelog.LiveLog(client) if client is not None else livelog.shared()

    def send(self, run_id: str, *payloads: dict) -> None:
        """Bodies for one run, in order, in ONE entry (one sequence number, one browser message): points and the
        anomaly frame about them are drawn once."""
        if payloads:
            self.log.append(run_id, [frame_of(run_id, p) for p in payloads])

    def close(self, timeout: float = 5.0) -> None:
        """Nothing is held back: every send was appended before it returned."""


SUMMARY_HOLD_S = 1.0  # changes that are only the run's summary (a heartbeat) wait this long for the next step's


def _summary_only(ch: RunChanges) -> bool:
    return not (ch.points or ch.rewinds or ch.events or ch.new_series)


class LiveBuffer:
    """Coalesces changes per run; flush_due() pushes each run at most once per `interval` seconds, and changes that
    are only the run's summary (a heartbeat between two steps) at most SUMMARY_HOLD_S late, with the next step's
    points when they come sooner: one entry, so one message per viewer per step."""

    def __init__(self, send, interval: float = 0.1, summary_hold: float = SUMMARY_HOLD_S, hold_all: bool = False):
        """hold_all (ingest with early points): everything pending after a commit (events, new series, the
        summary, hooks' frames) waits up to summary_hold for the next batch's points entry (take())."""
        self.send = send  # callable(run_id, *payloads)
        self.interval, self.summary_hold, self.hold_all = interval, summary_hold, hold_all
        self.pending: dict[str, RunChanges] = {}
        self.frames: dict[str, list[dict]] = {}  # run id -> feature frames held with its pending changes
        self.since: dict[str, float] = {}  # run id -> when its pending changes began
        self.last_push: dict[str, float] = {}
        self.pushes = 0

    def _due_at(self, run_id: str) -> float:
        at = self.last_push.get(run_id, -1e9) + self.interval
        if self.hold_all or _summary_only(self.pending[run_id]):
            at = max(at, self.since.get(run_id, -1e9) + self.summary_hold)
        return at

    def hold(self, run_id: str, frames: list[dict]) -> None:
        """Feature frames (hold_all): they go with the run's next entry, at most summary_hold late."""
        if run_id not in self.pending:
            self.pending[run_id] = RunChanges()
            self.since[run_id] = time.monotonic()
        self.frames.setdefault(run_id, []).extend(frames)

    def take(self, run_id: str) -> tuple[RunChanges | None, list[dict]]:
        """Everything pending for the run (to ride in the entry about to be appended)."""
        self.since.pop(run_id, None)
        return self.pending.pop(run_id, None), self.frames.pop(run_id, [])

    def add(self, changes: dict[str, RunChanges]) -> None:
        """One committed batch's changes, {run id: RunChanges} (an Ingestor's on_changes)."""
        for run_id, ch in changes.items():
            if not ch:
                continue
            if run_id in self.pending:
                self.pending[run_id].merge(ch)
            else:
                self.pending[run_id] = ch
                self.since[run_id] = time.monotonic()

    def next_due_in(self, now: float | None = None) -> float | None:
        if not self.pending:
            return None
        now = time.monotonic() if now is None else now
        return max(0.0, min(self._due_at(r) - now for r in self.pending))

    def flush_due(self, now: float | None = None, force: bool = False) -> int:
        now = time.monotonic() if now is None else now
        due = [r for r in self.pending if force or now >= self._due_at(r)]
        return self.flush_runs(due, now)

    def flush_runs(self, run_ids, now: float | None = None) -> int:
        """Push these runs' pending changes now, whatever the interval."""
        return sum(self.flush_with(run_id, (), now) for run_id in run_ids)

    def flush_with(self, run_id: str, frames: Sequence[dict], now: float | None = None) -> bool:
        """The run's pending changes now, whatever the interval, and feature frames about them after them in the same
        message (the frames alone when nothing is pending); whether changes were pushed."""
        changes = self.pending.pop(run_id, None)
        self.since.pop(run_id, None)
        frames = [*self.frames.pop(run_id, []), *frames]
        if changes is None:
            if frames:
                self.send(run_id, *frames)
            return False
        self.last_push[run_id] = time.monotonic() if now is None else now
        if not changes and frames:
            self.send(run_id, *frames)
            return False
        self.send(run_id, update_body(changes), *frames)
        self.pushes += 1
        return True


def push_now(run_id: str, changes: RunChanges) -> None:
    """One-off push from sync code that is not ingest (e.g. a Celery task noticing a dead run)."""
    livelog.shared().append(run_id, [frame_of(run_id, update_body(changes))])


def send_frame(run_id: str, frame: dict) -> None:
    """A feature frame (its "type" names it) from sync code of an app before live in the chain, through the
    runs.extensions sender slot (annotations). A failure is logged: the write stands, viewers see it on reload."""
    try:
        livelog.shared().append(run_id, [frame_of(run_id, frame)])
    except redis.RedisError as e:
        log.warning("live log: a %s frame for %s not appended: %s", frame.get("type"), run_id, e)
