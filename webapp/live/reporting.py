"""Ingest's counters left in Redis for /metrics (webapp.ops): a hash per ingest process, refreshed every few
seconds with a TTL, so that any web replica can report every ingest process without talking to it."""

from __future__ import annotations

import logging
import time

import redis

from webapp.ops.exposition import INGEST_STATS_PREFIX, INGEST_STATS_TTL_S

log = logging.getLogger("observatory.ingest")
EVERY_S = 5.0


class StatsReporter:
    def __init__(self, client: redis.Redis, consumer: str):
        self.client, self.key = client, INGEST_STATS_PREFIX + consumer
        self.next = 0.0

    def maybe_report(self, stats: dict) -> None:
        now = time.monotonic()
        if now < self.next:
            return
        self.next = now + EVERY_S
        fields = {k: v for k, v in stats.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        fields["t"] = time.time()
        try:
            pipe = self.client.pipeline(transaction=False)
            pipe.hset(self.key, mapping=fields)
            pipe.expire(self.key, INGEST_STATS_TTL_S)
            pipe.execute()
        except redis.RedisError as e:  # metrics must never stop ingestion
            log.debug("ingest stats not reported: %s", e)
