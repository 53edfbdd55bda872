"""Ingest throughput: drain pre-filled telemetry streams into SQLite and PostgreSQL with 1 and 2 consumers; or
(--trim) ingest fallen far behind a capped telemetry stream: what is lost, how fast the publisher goes, Redis memory."""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time

from harness import ROOT, PrivateRedis, Stack, drained, parser, proc_cpu_s, report, setup_django

GO, STOP = "bench:go", "bench:stop"


# ---------------------------------------------------------------------------------------------- the data sets
def prefill(client, runs: int, steps: int, width: int, seed: int = 1) -> list[str]:
    """`runs` runs' telemetry streams, `steps` metrics entries each of `width` random values; the run ids."""
    from observatory import contract

    rnd = random.Random(seed)
    names = [f"bench/layer{i // 16}/m{i % 16}" for i in range(width)]
    run_ids = [f"bench-{i}" for i in range(runs)]
    for run_id in run_ids:
        pipe = client.pipeline(transaction=False)
        pipe.sadd(contract.RUNS_KEY, run_id)
        for step in range(steps):
            pipe.xadd(contract.telemetry_stream(run_id),
                      contract.metrics_fields(run_id, step, {n: rnd.random() for n in names}, t=1.7e9 + step))
            if len(pipe) >= 200:
                pipe.execute()
        pipe.execute()
    return run_ids


# ---------------------------------------------------------------------------------------------- worker
def worker(name: str, redis_url: str, batch: int) -> None:
    """One consumer: wait for GO, step until STOP, print its counters as JSON."""
    setup_django()
    import redis
    from django.db import connection

    from webapp.metrics.ingest import Ingestor

    client = redis.Redis.from_url(redis_url)
    ing = Ingestor(client, consumer=name, batch=batch)
    backend = None
    with connection.cursor() as cur:  # open the connection now, outside the timed part
        if connection.vendor == "postgresql":
            cur.execute("SELECT pg_backend_pid()")
            backend = cur.fetchone()[0]
    print("ready", flush=True)
    while not client.exists(GO):
        time.sleep(0.005)
    cpu0, db0 = proc_cpu_s(os.getpid()), proc_cpu_s(backend) if backend else 0.0
    errors = 0
    while not client.exists(STOP):
        try:
            ing.step(20)
        except Exception as e:  # as `manage.py ingest`: entries stay pending, retried on the next step
            errors += 1
            print(f"{name}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
            time.sleep(0.1)
    cpu1, db1 = proc_cpu_s(os.getpid()), proc_cpu_s(backend) if backend else 0.0
    ing.close()
    print(json.dumps({"name": name, "points": ing.stats["points"], "entries": ing.stats["entries"],
                      "cpu_s": round(cpu1 - cpu0, 3), "db_cpu_s": round(db1 - db0, 3), "errors": errors}), flush=True)


# ---------------------------------------------------------------------------------------------- parent
def trial(stack: Stack, backend: str, consumers: int, runs: int, steps: int, width: int, batch: int) -> dict:
    """One drain on the stack's site (its own Redis, a database of `backend`, emptied first)."""
    import redis

    client, redis_pid = redis.Redis.from_url(stack.redis_url), stack.redis.proc.pid
    client.flushdb()
    stack.manage("flush", "--noinput", check=True)
    run_ids = prefill(client, runs, steps, width)
    procs = [subprocess.Popen([sys.executable, __file__, "--worker", f"bench-c{i}", "--redis", stack.redis_url,
                               "--batch", str(batch)], cwd=ROOT, env=stack.env, stdout=subprocess.PIPE, text=True)
             for i in range(consumers)]
    try:
        for p in procs:
            line = p.stdout.readline().strip()
            if line != "ready":
                raise RuntimeError(f"consumer did not start: {line!r}")
        t0, redis0 = time.perf_counter(), proc_cpu_s(redis_pid)
        client.set(GO, 1)
        deadline = time.monotonic() + 600
        while not drained(client, run_ids):
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise RuntimeError("ingest did not drain the streams")
            time.sleep(0.01)
        wall, redis_cpu = time.perf_counter() - t0, proc_cpu_s(redis_pid) - redis0
        client.set(STOP, 1)
        reports = [json.loads(p.communicate(timeout=300)[0].strip().splitlines()[-1]) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
                p.wait()
    expected = runs * steps * width
    stored = stack.sql("SELECT COUNT(*) FROM metrics_point")[0][0]
    cpu = sum(r["cpu_s"] for r in reports)
    db_cpu = sum(r["db_cpu_s"] for r in reports)
    out = {"backend": backend, "consumers": consumers, "points": expected, "stored": stored,
           "wall_s": round(wall, 2), "points_per_s": round(expected / wall),
           "ingest_cpu_s": round(cpu, 2), "points_per_cpu_s": round(expected / cpu) if cpu else None,
           "per_consumer_points": [r["points"] for r in reports], "errors": sum(r["errors"] for r in reports)}
    if backend == "postgresql":
        out["db_cpu_s"] = round(db_cpu, 2)
        out["points_per_cpu_s_with_db"] = round(expected / (cpu + db_cpu)) if cpu + db_cpu else None
    # Everything this drain cost the machine (ingest + database server + Redis); for PostgreSQL also the rate that
    # would allow with each consumer (and its server backend) on a core of its own, nothing else running: the
    # measured wall-clock rate depends on who else is busy (load_avg). SQLite serialises its writers.
    total = cpu + db_cpu + redis_cpu
    out["redis_cpu_s"] = round(redis_cpu, 2)
    out["points_per_total_cpu_s"] = round(expected / total) if total else None
    if backend == "postgresql" and total:
        out["cpu_bound_points_per_s"] = round(expected / total * min(consumers, os.cpu_count()))
    out["load_avg"] = round(os.getloadavg()[0], 1)
    if stored != expected:
        out["error"] = f"stored {stored} points, expected {expected}"
    return out


# ---------------------------------------------------------------------------------------------- --trim
def publish(pub, steps, names) -> float:
    """Publish these steps without overflowing the queue; returns the seconds it took."""
    t0 = time.perf_counter()
    for step in steps:
        if step % 1000 == 0 and pub.stats()["queue_depth"] > pub.max_queue // 2:
            pub.flush(60)  # a bench waits for a full queue rather than drop
        pub.metrics(step, {n: 0.5 for n in names})
    assert pub.flush(600) and pub.stats()["dropped"] == 0
    return time.perf_counter() - t0


def read_back(client, stream) -> tuple[list[int], int]:
    """The ingest group's backlog: (metrics steps in order, other entries)."""
    from observatory import contract

    steps, other, last = [], 0, ">"
    while True:
        reply = client.xreadgroup(contract.INGEST_GROUP, "bench", {stream: last}, count=20_000)
        entries = reply[0][1] if reply else []
        if not entries:
            return steps, other
        for _, fields in entries:
            if fields[b"kind"] == b"metrics":
                steps.append(json.loads(fields[b"data"])["step"])
            else:
                other += 1
        client.xack(stream, contract.INGEST_GROUP, *[e for e, _ in entries])


def measure_trim(read: int, behind: int, width: int) -> dict:
    import redis

    from observatory import contract
    from observatory.streams import Publisher

    names = [f"bench/m{i}" for i in range(width)]
    with PrivateRedis() as private:
        url = private.url
        client = redis.Redis.from_url(url)
        run_id = "trim-bench"
        stream = contract.telemetry_stream(run_id)
        client.xgroup_create(stream, contract.INGEST_GROUP, id="0", mkstream=True)
        pub = Publisher(url, run_id, batch=500)
        t_read = publish(pub, range(read), names)
        last = client.xrevrange(stream, count=1)[0][0]
        client.xgroup_setid(stream, contract.INGEST_GROUP, last, entries_read=read)  # read and acknowledged
        t_behind = publish(pub, range(read, read + behind), names)
        pub.close()
        mem = client.info("memory")
        length = client.xlen(stream)
        counted = {k.decode(): int(v) for k, v in client.hgetall(contract.telemetry_lost_key(run_id)).items()}
        t0 = time.perf_counter()
        steps, other = read_back(client, stream)
        t_back = time.perf_counter() - t0
        missing = behind - len(set(steps) & set(range(read, read + behind)))
        client.close()
    return {"cap": contract.STREAM_MAXLEN, "hard_cap": contract.STREAM_HARD_MAXLEN,
            "width": width, "acknowledged_before": read, "behind": behind,
            "entries_lost": missing, "lost_counted": counted, "other_entries_in_backlog": other,
            "in_order": steps == sorted(steps), "stream_length_at_end": length,
            "publish_s": round(t_read + t_behind, 1),
            "publish_rate_per_s": round((read + behind) / (t_read + t_behind)),
            "read_back_s": round(t_back, 1), "redis_used_memory_mb": round(mem["used_memory"] / 2**20),
            "redis_peak_memory_mb": round(mem["used_memory_peak"] / 2**20),
            "bytes_per_entry": round(mem["used_memory"] / max(1, length))}


def main() -> int:
    ap = parser(__doc__, "ingest", "trim")
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--steps", type=int, default=300, help="steps per run")
    ap.add_argument("--width", type=int, help="metrics per entry (default 242, the demo trainer's; --trim: 1)")
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--consumers", default="1,2")
    ap.add_argument("--backends", default="sqlite,postgresql")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--redis", help=argparse.SUPPRESS)
    ap.add_argument("--trim", action="store_true", help="ingest far behind a capped stream instead")
    ap.add_argument("--read", type=int, default=500_000, help="--trim: entries ingest reads and acknowledges first")
    ap.add_argument("--behind", type=int, default=1_500_000, help="--trim: entries published after ingest stopped")
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.redis, args.batch)
        return 0
    if args.trim:
        return report("trim", measure_trim(args.read, args.behind, args.width or 1), args.json, not args.no_save)
    args.width = args.width or 242
    results, failed = [], False
    for backend in args.backends.split(","):
        with Stack("ingest") as stack:  # a redis-server of its own, a database of this backend
            stack.site(private_redis=True, database_url=stack.database(backend))
            for n in (int(c) for c in args.consumers.split(",")):
                r = trial(stack, backend, n, args.runs, args.steps, args.width, args.batch)
                failed |= "error" in r
                results.append(r)
                if not args.json:
                    print(json.dumps(r), file=sys.stderr, flush=True)
    report("ingest", {"runs": args.runs, "steps": args.steps, "width": args.width, "batch": args.batch,
                      "results": results}, args.json, not args.no_save and not failed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
