"""This process's live fan-out numbers as Prometheus families for /metrics (webapp.ops)."""

from __future__ import annotations

import time

import redis
from django.conf import settings

from webapp.live import livelog, relay, stats
from webapp.live.relay import STATS_KEY
from webapp.ops import probes
from webapp.ops.exposition import Family, histogram


def push_tier() -> list[Family]:
    """Each relay's numbers (webapp.live.relay.Relay.report, one hash per relay) when a push tier is configured;
    none if every relay is silent."""
    if not settings.OBS_LIVE_PUSH_URL:
        return []
    relays = {}
    try:
        client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=1.0)
        for key in client.scan_iter(match=f"{STATS_KEY}:*", count=100):
            h = {k.decode(): float(v) for k, v in client.hgetall(key).items()}
            if h:
                relays[key.decode().rsplit(":", 1)[1][:12]] = h
        client.close()
    except (redis.RedisError, ValueError):
        return []
    if not relays:
        return []
    fams = {
        "subscribers": Family("observatory_push_subscribers", "gauge",
                              "viewers on the push tier's channels (nchan's count at each relay's last publish)"),
        "frames": Family("observatory_push_frames_total", "counter", "live log entries each relay published"),
        "lag_entries": Family("observatory_push_relay_lag_entries", "gauge",
                              "entries of its runs' live logs a relay has not yet published (its worst run)"),
        "runs": Family("observatory_push_relay_runs", "gauge", "runs a relay holds the lease of"),
        "gaps": Family("observatory_push_relay_gaps_total", "counter",
                       "gap frames a relay sent (its cursor was older than the log's window)"),
        "leases_lost": Family("observatory_push_relay_leases_lost_total", "counter",
                              "runs a relay lost to another while holding them (its lease lapsed or was taken)"),
    }
    delay = Family("observatory_push_delay_seconds", "gauge", "an entry's append to the live log -> the relay's "
                   "publish to nchan, over the relay's last report interval")
    for relay, h in sorted(relays.items()):
        for field, fam in fams.items():
            fam.add(h.get(field, 0), relay=relay)
        delay.add(h.get("delay_p50_s", 0), quantile="0.5", relay=relay)
        delay.add(h.get("delay_max_s", 0), quantile="1", relay=relay)
    return [*fams.values(), delay]


LIVE_LAG_OK = 25  # entries: about five seconds at 5 steps/s


def live_health() -> dict[str, str]:
    """/healthz's "live_lag", apart from ingest's: how far the push tier's relays are behind the live logs of the
    active runs ("ok", "N entries behind on <run>", "no relay holds <run>"); "ok (no push tier)" without one (the
    hub reads the logs itself, in each web process)."""
    if not settings.OBS_LIVE_PUSH_URL:
        return {"live_lag": "ok (no push tier)"}
    try:
        client = probes.client()  # (kept between probes, with the probes' short timeouts)
        now_ms = int(time.time() * 1000)
        runs = [r.decode() for r in client.zrangebyscore(livelog.RUNS_KEY, now_ms - relay.IDLE_S * 1000, "+inf")]
        worst, where = 0, ""
        for run_id in runs[:200]:
            last = client.xrevrange(livelog.log_key(run_id), count=1)
            cursor = client.get(relay.cursor_key(run_id))
            if last and not client.exists(relay.lease_key(run_id)):
                return {"live_lag": f"no relay holds {run_id}"}
            lag = livelog.seq_of(last[0][0]) - int(cursor.split(b" ")[0]) if last and cursor else 0
            if lag > worst:
                worst, where = lag, run_id
    except (redis.RedisError, ValueError) as e:
        return {"live_lag": f"unknown ({type(e).__name__})"}
    return {"live_lag": "ok" if worst <= LIVE_LAG_OK else f"{worst} entries behind on {where}"}


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
