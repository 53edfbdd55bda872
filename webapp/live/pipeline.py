"""Ingest wired to live pushes, what `manage.py ingest` runs: every batch metrics' Ingestor commits becomes
coalesced pushes to the browsers watching its run (at most one per run per interval, after the XACK)."""

from __future__ import annotations

import redis

from webapp.live.push import LiveBuffer
from webapp.metrics.ingest import Ingestor


class LiveIngest:
    def __init__(self, client: redis.Redis, send, *, consumer: str = "ingest-1", batch: int = 500,
                 interval: float = 0.1):
        """send: callable(run_id, update body), e.g. LivePublisher.send."""
        self.buffer = LiveBuffer(send, interval=interval)
        self.ingestor = Ingestor(client, on_changes=self.buffer.add, consumer=consumer, batch=batch)

    def step(self, block_ms: int) -> int:
        """One ingest iteration, blocking no longer than the next push is due; then push what is due."""
        due = self.buffer.next_due_in()
        if due is not None:
            block_ms = min(block_ms, max(1, int(due * 1000)))
        n = self.ingestor.step(block_ms)
        self.flush()
        return n

    def drain(self) -> int:
        """Everything available now, then push it all (--once, tests)."""
        n = self.ingestor.drain()
        self.flush(force=True)
        return n

    def flush(self, force: bool = False) -> None:
        self.buffer.flush_due(force=force)
        self.ingestor.stats["pushes"] = self.buffer.pushes
