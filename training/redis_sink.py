"""The Redis sink: the `training.sinks.Sink` interface on top of the non-blocking `observatory.publisher`."""

from __future__ import annotations

from typing import Any, Mapping

from observatory.publisher import Publisher
from training.sinks import Sink


class RedisSink(Sink):
    """Every call only enqueues; the publisher's thread writes to the run's telemetry stream."""

    def __init__(self, redis_url: str, run_id: str, publisher: Publisher | None = None, **publisher_kwargs):
        self.publisher = publisher or Publisher(redis_url, run_id, **publisher_kwargs)

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        self.publisher.metrics(step, metrics)

    def event(self, name: str, step: int, payload: Mapping[str, Any] | None = None) -> None:
        self.publisher.publish("event", {"step": int(step), "name": name, "payload": dict(payload or {})})

    def record(self, kind: str, data: Mapping[str, Any]) -> None:
        self.publisher.publish(kind, data)

    def stats(self) -> dict:
        return self.publisher.stats()

    def finish(self, timeout_s: float = 5.0) -> None:
        # With Redis gone there is nothing to wait for: do not hold up the process exit.
        self.publisher.close(timeout_s if self.publisher.stats()["connected"] else min(timeout_s, 0.5))
