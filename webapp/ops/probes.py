"""What /healthz and /metrics read outside this process: the database and Redis (ingest lag, throughput, dead
letters). Each probe is bounded in time so a dead dependency makes a 503, not a hanging probe."""

from __future__ import annotations

import time

import redis
from django.conf import settings
from django.db import connection

from observatory import contract
from webapp.ops.exposition import INGEST_STATS_PREFIX, Family

MAX_RUNS = 200  # runs listed with their own lag label; the total covers all


def check_database() -> str | None:
    """None when a query answers, else the error."""
    try:
        with connection.cursor() as cur:
            cur.execute("SELECT 1")
            cur.fetchone()
        return None
    except Exception as e:
        return f"{type(e).__name__}: {e}"[:200]


def client() -> redis.Redis:
    # Own short timeouts: a probe must answer well within a Kubernetes probe's timeout even if Redis hangs.
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=1, socket_connect_timeout=1)


def check_redis(r: redis.Redis) -> str | None:
    try:
        r.ping()
        return None
    except Exception as e:
        return f"{type(e).__name__}: {e}"[:200]


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def redis_families(r: redis.Redis) -> list[Family]:
    """Ingest lag per run (the `ingest` group's lag and pending entries), ingest counters left by each ingest
    process, dead letters. Empty when Redis does not answer (the up gauge says so)."""
    up = Family("observatory_redis_up", "gauge", "1 when Redis answered this scrape").add(0)
    try:
        runs = sorted(_text(x) for x in r.smembers(contract.RUNS_KEY))
        lag = Family("observatory_ingest_lag_entries", "gauge",
                     "telemetry entries not yet read by ingest, per run (consumer group lag)")
        pending = Family("observatory_ingest_pending_entries", "gauge",
                         "entries read by ingest and not yet acknowledged, per run")
        total_lag = 0
        for i, run in enumerate(runs):
            try:
                groups = r.xinfo_groups(contract.telemetry_stream(run))
            except redis.ResponseError:  # no stream (yet)
                continue
            for g in groups:
                if _text(g.get("name", g.get(b"name", ""))) != contract.INGEST_GROUP:
                    continue
                n_lag = g.get("lag") or 0
                n_pending = g.get("pending") or 0
                total_lag += n_lag
                if i < MAX_RUNS:
                    lag.add(n_lag, run=run)
                    pending.add(n_pending, run=run)
        totals = Family("observatory_ingest_lag_entries_all_runs", "gauge",
                        "entries not yet read by ingest, all runs together").add(total_lag)
        counts = {_text(k): int(v) for k, v in r.hgetall(contract.DEADLETTER_COUNT_KEY).items()}
        dead = Family("observatory_deadletters_total", "counter", "entries ingest refused, by reason")
        for reason, n in sorted(counts.items()):
            dead.add(n, reason=reason)
        dead_len = Family("observatory_deadletter_stream_length", "gauge", "entries in the dead-letter stream").add(
            r.xlen(contract.DEADLETTER_STREAM))
        points = Family("observatory_ingest_points_total", "counter", "points stored, per ingest process")
        entries = Family("observatory_ingest_entries_total", "counter", "stream entries read, per ingest process")
        seen = Family("observatory_ingest_report_age_seconds", "gauge", "seconds since each ingest process reported")
        now = time.time()
        for key in r.scan_iter(match=INGEST_STATS_PREFIX + "*", count=100):
            h = {_text(k): _text(v) for k, v in r.hgetall(key).items()}
            who = _text(key)[len(INGEST_STATS_PREFIX):]
            points.add(float(h.get("points", 0)), consumer=who)
            entries.add(float(h.get("entries", 0)), consumer=who)
            seen.add(round(now - float(h.get("t", now)), 3), consumer=who)
        up.samples = [("", {}, 1)]
        runs_g = Family("observatory_runs", "gauge", "runs announced in Redis").add(len(runs))
        return [up, runs_g, lag, totals, pending, dead, dead_len, points, entries, seen]
    except (redis.RedisError, OSError, ValueError):
        return [up]
