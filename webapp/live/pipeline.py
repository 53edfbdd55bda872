"""Ingest wired to live pushes, what `manage.py ingest` (webapp.metrics) runs: every batch metrics' Ingestor
commits becomes coalesced entries of its run's live log (at most one per run per interval; webapp.live.livelog, which
the hub and the relay read: ingest never calls the push tier), after later
apps' hooks (metrics.changes.on_commit_hooks, timers: anomaly detection) have seen it and pushed their frames.
Entries are XACKed only once their run's changes were pushed: an ingest killed in between leaves them pending, and
the ingest that takes its streams over replays and pushes them, so a live viewer misses nothing."""

from __future__ import annotations

import logging
import time

import redis
from django.db import InterfaceError, OperationalError, ProgrammingError

from observatory import contract
from observatory.downsample import classify
from webapp.live.push import LiveBuffer, LivePublisher
from webapp.live.protocol import update_body
from webapp.live.reporting import StatsReporter
from webapp.metrics import changes as hooks
from webapp.metrics.changes import RunChanges
from webapp.metrics.ingest import Ingestor

log = logging.getLogger("observatory.ingest")


class LiveIngest:
    def __init__(self, client: redis.Redis, send, *, consumer: str = "ingest-1", batch: int = 500,
                 interval: float = 0.1, lease_ms: int | None = None, early_points: bool = False):
        """send: callable(run_id, *bodies), the run's bodies in order in one message, e.g. LivePublisher.send.
        lease_ms: see metrics.ingest.LEASE_MS."""
        self.send = send
        self.buffer = LiveBuffer(send, interval=interval, hold_all=early_points)
        self.ingestor = Ingestor(client, on_changes=self._committed, consumer=consumer, batch=batch,
                                 **({"lease_ms": lease_ms} if lease_ms else {}))
        self.ingestor.defer_acks = True
        self.early_points = early_points
        if early_points:  # `manage.py ingest`: points before the SQL write, the rest after it (one entry a step)
            self.ingestor.on_decoded = self._decoded
        # early points: stream -> ids of the entries whose changes the buffer holds for the next points entry
        # (acknowledged once that entry is appended: a successor replays only those, not the run's history)
        self.held: dict[str, set[str]] = {}
        self.next_timer = time.monotonic() + hooks.TIMER_EVERY_S
        self.hook_s = 0.0  # time spent in later apps' hooks and timers (anomaly detection), for stats and benches

    def _decoded(self, messages) -> None:
        """A batch read and valid: its points and rewinds go to the runs' live logs now, before the SQL write (a
        viewer's delay does not include it), one entry per run, with the run's summary if one was waiting for it.
        What only storage knows (event ids, the summary, new series) follows after the commit (_committed). A batch
        written again (a database error, a takeover) appends its points again: the page drops steps it holds."""
        by_run: dict[str, RunChanges] = {}
        for msg in messages:
            if msg.kind == "metrics":
                ch = by_run.setdefault(msg.run, RunChanges())
                step = msg.data["step"]
                for name, x in msg.data["values"].items():
                    ch.add_point(name, step, *classify(x))
                ch.times[step] = msg.data["t"]
            elif msg.kind == "rewind":
                by_run.setdefault(msg.run, RunChanges()).rewind(msg.data["from_step"], msg.data["to_step"])
        for run_id, ch in by_run.items():
            ch.points = {name: pts for name, pts in ch.points.items() if pts}
            if not (ch.points or ch.rewinds):
                continue
            held, frames = self.buffer.take(run_id)  # what the last commits made, waiting for these points
            self.held.pop(contract.telemetry_stream(run_id), None)
            if held is not None:
                ch.events, ch.run, ch.new_series = held.events, held.run, held.new_series
            body = update_body(ch)
            if not body["events"]:
                del body["events"]
            self.send(run_id, body, *frames)

    def _committed(self, changes) -> None:
        """A batch committed: later apps' hooks (metrics.changes.on_commit_hooks) first, then the coalesced push.
        A run that a hook has a frame for (an anomaly) gets its points pushed now with the frame, in one message:
        the points first (the marker has its point to sit on), and a web process sends both in one batch, which
        the browser draws once (two messages were two sends 50 ms apart, the hub's minimum interval, and two
        redraws: bench/liveview.py)."""
        frames = self._run_hooks(hooks.on_commit_hooks, changes)
        if self.early_points:
            for ch in changes.values():  # points and rewinds went before the write (_decoded)
                ch.points, ch.rewinds, ch.times = {}, [], {}
        self.buffer.add(changes)
        by_run: dict[str, list[dict]] = {}
        for run_id, frame in frames:
            by_run.setdefault(run_id, []).append(frame)
        for run_id, run_frames in by_run.items():
            if self.early_points:  # with the next batch's points (at most SUMMARY_HOLD_S late): one entry a step
                self.buffer.hold(run_id, run_frames)
            else:
                self.buffer.flush_with(run_id, run_frames)

    def _run_hooks(self, fns, arg) -> list[tuple[str, dict]]:
        t0 = time.perf_counter()
        out = []
        for fn in fns:
            try:
                out += list(fn(arg) or ())
            except (OperationalError, InterfaceError, ProgrammingError):
                raise  # the database is away: ingest retries the batch (nothing was acknowledged)
            except Exception:  # a feature's bug must not stop ingestion
                log.exception("ingest hook %s failed", getattr(fn, "__qualname__", fn))
        self.hook_s += time.perf_counter() - t0
        return out

    def step(self, block_ms: int) -> int:
        """One ingest iteration, blocking no longer than the next push is due; then push what is due."""
        due = self.buffer.next_due_in()
        if due is not None:
            block_ms = min(block_ms, max(1, int(due * 1000)))
        block_ms = min(block_ms, max(1, int((self.next_timer - time.monotonic()) * 1000)))
        n = self.ingestor.step(block_ms)
        self.flush()
        if time.monotonic() >= self.next_timer:  # feature timers run even when nothing arrives (stall checks)
            self.next_timer = time.monotonic() + hooks.TIMER_EVERY_S
            for run_id, frame in self._run_hooks(hooks.timers, time.time()):
                self.send(run_id, frame)  # at once: feature frames are rare and wanted within a second
        return n

    def drain(self) -> int:
        """Everything available now, then push it all (--once, tests)."""
        n = self.ingestor.drain()
        self.flush(force=True)
        return n

    def close(self) -> None:
        """Push what is buffered, then hand the streams back to the other ingest processes."""
        try:
            self.flush(force=True)
        except redis.RedisError as e:  # unacknowledged entries stay pending: the next owner replays them
            log.warning("could not acknowledge the last pushes (%s)", e)
        self.ingestor.close()

    def flush(self, force: bool = False) -> None:
        self.buffer.flush_due(force=force)
        batch, self.ingestor.last_batch = self.ingestor.last_batch, {}
        if not self.early_points:
            self.ingestor.ack(except_runs=set(self.buffer.pending))  # what was pushed (or had nothing to push)
        else:  # held: the entries whose changes wait in the buffer (the rest went out with points entries)
            pending = {contract.telemetry_stream(r) for r in self.buffer.pending}
            for stream, ids in batch.items():
                if stream in pending:
                    self.held.setdefault(stream, set()).update(ids)
            self.held = {s: ids for s, ids in self.held.items() if s in pending}
            self.ingestor.ack(keep=self.held)
        self.ingestor.stats["pushes"] = self.buffer.pushes
        self.ingestor.stats["hook_ms"] = int(self.hook_s * 1000)


class IngestProcess:
    """What `manage.py ingest` runs (live registers it as metrics.changes.ingest_process): LiveIngest pushing
    through a LivePublisher, its counters left in Redis for /metrics (webapp.live.reporting)."""

    def __init__(self, client: redis.Redis, *, consumer: str, batch: int, interval: float, lease_ms: int):
        self.publisher = LivePublisher(client)
        self.live = LiveIngest(client, self.publisher.send, consumer=consumer, batch=batch, interval=interval,
                               lease_ms=lease_ms, early_points=True)
        self.reporter = StatsReporter(client, consumer)
        self.stats = self.live.ingestor.stats

    def step(self, block_ms: int) -> int:
        n = self.live.step(block_ms)
        self.reporter.maybe_report(self.stats)
        return n

    def drain(self) -> int:
        return self.live.drain()

    def close(self) -> None:
        try:
            self.live.close()
        finally:
            self.publisher.close()
