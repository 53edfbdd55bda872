"""This process's live fan-out numbers as Prometheus families for /metrics (webapp.ops)."""

from __future__ import annotations

import redis
from django.conf import settings

from webapp.live import stats
from webapp.live.relay import STATS_KEY
from webapp.ops.exposition import Family, histogram


def push_tier() -> list[Family]:
    """The relay's numbers (webapp.live.relay.Relay.report) when a push tier is configured; none if it is silent."""
    if not settings.OBS_LIVE_PUSH_URL:
        return []
    try:
        client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=1.0)
        h = {k.decode(): float(v) for k, v in client.hgetall(STATS_KEY).items()}
        client.close()
    except (redis.RedisError, ValueError):
        return []
    if not h:
        return []
    return [
        Family("observatory_push_subscribers", "gauge", "viewers on the push tier's channels (nchan's count)")
        .add(h.get("subscribers", 0)),
        Family("observatory_push_frames_total", "counter", "frames the relay published").add(h.get("frames", 0)),
        Family("observatory_push_delay_seconds", "gauge", "a step's publish by the trainer -> the relay's publish "
               "to nchan, over the relay's last 5 s").add(h.get("delay_p50_s", 0), quantile="0.5")
        .add(h.get("delay_max_s", 0), quantile="1"),
    ]


def collect() -> list[Family]:
    c = stats.counters
    closed = Family("observatory_ws_closed_total", "counter", "sockets the server closed, by reason")
    closed.add(c["closed_slow"], reason="too_slow").add(c["closed_rate"], reason="rate_limit")
    closed.add(c["resyncs"], reason="resync")
    return [
        Family("observatory_ws_clients", "gauge", "open live WebSockets in this process").add(stats.gauges["clients"]),
        Family("observatory_ws_frames_sent_total", "counter", "live frames written (a batch counts its frames)")
        .add(c["frames_sent"]),
        Family("observatory_ws_messages_sent_total", "counter", "WebSocket messages written by the fan-out")
        .add(c["messages_sent"]),
        Family("observatory_ws_bytes_sent_total", "counter", "bytes of live messages written").add(c["bytes_sent"]),
        Family("observatory_live_updates_received_total", "counter", "run updates this process received")
        .add(c["updates_received"]),
        Family("observatory_live_variants_encoded_total", "counter", "frame encodings (once per variant per flush)")
        .add(c["variants_encoded"]),
        closed,
        histogram("observatory_live_relay_delay_seconds", "ingest's push -> this process's fan-out",
                  stats.BUCKETS, stats.relay_delay.counts, stats.relay_delay.total, stats.relay_delay.sum),
        histogram("observatory_live_push_delay_seconds", "the step's publish by the trainer -> this process's fan-out",
                  stats.BUCKETS, stats.push_delay.counts, stats.push_delay.total, stats.push_delay.sum),
        *push_tier(),
    ]
