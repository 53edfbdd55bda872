"""What /healthz and /metrics read outside this process: the database and Redis (ingest lag, throughput, dead
letters, telemetry lost). Each probe is bounded in time so a dead dependency makes a 503, not a hanging probe."""

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


_clients: dict[str, redis.Redis] = {}


def client() -> redis.Redis:
    """The probes' client, one per process (per REDIS_URL): its pool keeps a connection between probes (a new one
    per probe cost more than the rest of /healthz), each command still goes to Redis (a dead one: an error).
    Own short timeouts: a probe must answer well within a Kubernetes probe's timeout even if Redis hangs."""
    url = settings.REDIS_URL  # read at call time: tests point it at their own database
    r = _clients.get(url)
    if r is None:  # (two threads racing here make two clients; one is kept)
        r = _clients.setdefault(url, redis.Redis.from_url(url, socket_timeout=1, socket_connect_timeout=1))
    return r


def check_redis(r: redis.Redis) -> str | None:
    try:
        r.ping()
        return None
    except Exception as e:
        return f"{type(e).__name__}: {e}"[:200]


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def ingest_lags(r: redis.Redis, runs: list[str]) -> dict[str, tuple[int | None, int]]:
    """{run: (entries not yet read by the `ingest` group, or None when Redis cannot tell; entries pending)} for the
    runs whose stream has the group. Redis' `lag` is nil after deletions it cannot count past (XDEL, a group
    created or moved behind them); then entries-added minus the group's entries-read, where Redis gives that."""
    pipe = r.pipeline(transaction=False)
    for run in runs:
        pipe.xinfo_groups(contract.telemetry_stream(run))
    out, unsure = {}, {}
    for run, groups in zip(runs, pipe.execute(raise_on_error=False)):
        if isinstance(groups, Exception):  # no stream (yet)
            continue
        for g in groups:
            if _text(g.get("name", g.get(b"name", ""))) == contract.INGEST_GROUP:
                out[run] = (g.get("lag"), g.get("pending") or 0)
                if g.get("lag") is None and g.get("entries-read") is not None:
                    unsure[run] = g["entries-read"]
    if unsure:
        pipe = r.pipeline(transaction=False)
        for run in unsure:
            pipe.xinfo_stream(contract.telemetry_stream(run))
        for (run, read), info in zip(unsure.items(), pipe.execute(raise_on_error=False)):
            if not isinstance(info, Exception) and info.get("entries-added") is not None:
                out[run] = (max(0, info["entries-added"] - read), out[run][1])
    return out


def lag_health(r: redis.Redis) -> str:
    """/healthz's word on ingest lag: "ok", or how many runs' lag Redis cannot tell."""
    try:
        runs = sorted(_text(x) for x in r.smembers(contract.RUNS_KEY))
        unknown = sum(1 for lag, _ in ingest_lags(r, runs).values() if lag is None)
    except (redis.RedisError, OSError) as e:
        return f"unknown ({type(e).__name__})"
    return f"unknown for {unknown} run{'s' if unknown != 1 else ''}" if unknown else "ok"


def lost_families(r: redis.Redis, runs: list[str]) -> list[Family]:
    """Telemetry entries lost before ingest read them, per run and how (observatory.streams.trim)."""
    lost = Family("observatory_telemetry_lost_entries_total", "counter",
                  "telemetry entries lost before ingest read them, per run: trimmed past the stream's cap, or "
                  "dropped by a publisher's full queue")
    pipe = r.pipeline(transaction=False)
    for run in runs:
        pipe.hgetall(contract.telemetry_lost_key(run))
    total = 0
    for run, counts in zip(runs, pipe.execute()):
        for how, n in sorted((_text(k), int(v)) for k, v in counts.items()):
            lost.add(n, run=run, how=how)
            total += n
    totals = Family("observatory_telemetry_lost_entries_all_runs", "counter",
                    "telemetry entries lost before ingest read them, all runs together").add(total)
    return [lost, totals]


def redis_families(r: redis.Redis) -> list[Family]:
    """Ingest lag per run (the `ingest` group's lag and pending entries; unknown lags are flagged, not shown as
    0), telemetry entries lost, ingest counters left by each ingest process, dead letters. Empty when Redis does
    not answer (the up gauge says so)."""
    up = Family("observatory_redis_up", "gauge", "1 when Redis answered this scrape").add(0)
    try:
        runs = sorted(_text(x) for x in r.smembers(contract.RUNS_KEY))
        lag = Family("observatory_ingest_lag_entries", "gauge",
                     "telemetry entries not yet read by ingest, per run (consumer group lag); absent when unknown")
        unknown = Family("observatory_ingest_lag_unknown", "gauge",
                         "1 for a run whose ingest lag Redis cannot tell (its lag sample is left out)")
        pending = Family("observatory_ingest_pending_entries", "gauge",
                         "entries read by ingest and not yet acknowledged, per run")
        total_lag, n_unknown = 0, 0
        for i, (run, (n_lag, n_pending)) in enumerate(sorted(ingest_lags(r, runs).items())):
            total_lag += n_lag or 0
            n_unknown += n_lag is None
            if i < MAX_RUNS:
                if n_lag is not None:
                    lag.add(n_lag, run=run)
                unknown.add(int(n_lag is None), run=run)
                pending.add(n_pending, run=run)
        totals = Family("observatory_ingest_lag_entries_all_runs", "gauge",
                        "entries not yet read by ingest, all runs together (runs of unknown lag left out)").add(
            total_lag)
        unknown_all = Family("observatory_ingest_lag_unknown_runs", "gauge",
                             "runs whose ingest lag Redis cannot tell").add(n_unknown)
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
        return [up, runs_g, lag, totals, unknown, unknown_all, pending, *lost_families(r, runs), dead, dead_len,
                points, entries, seen]
    except (redis.RedisError, OSError, ValueError):
        return [up]
