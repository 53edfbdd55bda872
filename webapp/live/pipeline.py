"""Ingest wired to live pushes, what `manage.py ingest` (webapp.metrics) runs: every batch metrics' Ingestor
commits becomes coalesced pushes to the browsers watching its run (at most one per run per interval), after later
apps' hooks (metrics.changes.on_commit_hooks, timers: anomaly detection) have seen it and pushed their frames.
Entries are XACKed only once their run's changes were pushed: an ingest killed in between leaves them pending, and
the ingest that takes its streams over replays and pushes them, so a live viewer misses nothing."""

from __future__ import annotations

import logging
import time

import redis
from django.db import InterfaceError, OperationalError, ProgrammingError

from webapp.live.push import LiveBuffer, LivePublisher
from webapp.live.reporting import StatsReporter
from webapp.metrics import changes as hooks
from webapp.metrics.ingest import Ingestor

log = logging.getLogger("observatory.ingest")


class LiveIngest:
    def __init__(self, client: redis.Redis, send, *, consumer: str = "ingest-1", batch: int = 500,
                 interval: float = 0.1, lease_ms: int | None = None):
        """send: callable(run_id, *bodies), the run's bodies in order in one message, e.g. LivePublisher.send.
        lease_ms: see metrics.ingest.LEASE_MS."""
        self.send = send
        self.buffer = LiveBuffer(send, interval=interval)
        self.ingestor = Ingestor(client, on_changes=self._committed, consumer=consumer, batch=batch,
                                 **({"lease_ms": lease_ms} if lease_ms else {}))
        self.ingestor.defer_acks = True
        self.next_timer = time.monotonic() + hooks.TIMER_EVERY_S
        self.hook_s = 0.0  # time spent in later apps' hooks and timers (anomaly detection), for stats and benches

    def _committed(self, changes) -> None:
        """A batch committed: later apps' hooks (metrics.changes.on_commit_hooks) first, then the coalesced push.
        A run that a hook has a frame for (an anomaly) gets its points pushed now with the frame, in one message:
        the points first (the marker has its point to sit on), and a web process sends both in one batch, which
        the browser draws once (two messages were two sends 50 ms apart, the hub's minimum interval, and two
        redraws: bench/liveview.py)."""
        frames = self._run_hooks(hooks.on_commit_hooks, changes)
        self.buffer.add(changes)
        by_run: dict[str, list[dict]] = {}
        for run_id, frame in frames:
            by_run.setdefault(run_id, []).append(frame)
        for run_id, run_frames in by_run.items():
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
        self.ingestor.ack(except_runs=set(self.buffer.pending))  # what was pushed (or had nothing to push)
        self.ingestor.stats["pushes"] = self.buffer.pushes
        self.ingestor.stats["hook_ms"] = int(self.hook_s * 1000)


class IngestProcess:
    """What `manage.py ingest` runs (live registers it as metrics.changes.ingest_process): LiveIngest pushing
    through a LivePublisher, its counters left in Redis for /metrics (webapp.live.reporting)."""

    def __init__(self, client: redis.Redis, *, consumer: str, batch: int, interval: float, lease_ms: int):
        self.publisher = LivePublisher()
        self.live = LiveIngest(client, self.publisher.send, consumer=consumer, batch=batch, interval=interval,
                               lease_ms=lease_ms)
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
