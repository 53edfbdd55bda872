"""The Redis sink: the `training.sinks.Sink` interface on top of the non-blocking `observatory.streams.Publisher`."""

from __future__ import annotations

import logging
from typing import Any, Mapping

from observatory import contract
from observatory.streams import Publisher, connect, newest_metrics_step
from training.sinks import Sink

log = logging.getLogger(__name__)


class RedisSink(Sink):
    """Every call only enqueues; the publisher's thread writes to the run's telemetry stream."""

    def __init__(self, redis_url: str, run_id: str, publisher: Publisher | None = None, **publisher_kwargs):
        self.redis_url, self.run_id = redis_url, run_id
        self.publisher = publisher or Publisher(redis_url, run_id, **publisher_kwargs)

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        self.publisher.metrics(step, metrics)

    def event(self, name: str, step: int, payload: Mapping[str, Any] | None = None) -> None:
        self.publisher.publish("event", {"step": int(step), "name": name, "payload": dict(payload or {})})

    def record(self, kind: str, data: Mapping[str, Any]) -> None:
        self.publisher.publish(kind, data)

    def stats(self) -> dict:
        return self.publisher.stats()

    def health(self) -> dict[str, float]:
        st = self.publisher.stats()
        return {contract.M_PUBLISH_DROPPED: float(st["dropped"]), contract.M_PUBLISH_QUEUE: float(st["queue_depth"])}

    def last_step(self) -> int | None:
        """The step of the newest metrics entry on the run's stream (None if there is none or Redis is away)."""
        try:
            client = connect(self.redis_url, timeout=2.0)
            try:
                return newest_metrics_step(client, self.run_id)
            finally:
                client.close()
        except Exception as e:  # Redis is optional for training: without it there is nothing to supersede
            log.warning("[%s] could not read the newest published step: %s", self.run_id, e)
            return None

    def finish(self, timeout_s: float = 5.0) -> None:
        # With Redis gone there is nothing to wait for: do not hold up the process exit.
        self.publisher.close(timeout_s if self.publisher.stats()["connected"] else min(timeout_s, 0.5))
        st = self.publisher.stats()
        log.info("[%s] publisher: %d published, %d dropped, %d trimmed unread, %d reconnects", self.run_id,
                 st["published"], st["dropped"], st.get("trimmed", 0), st["reconnects"])
