"""What anomaly detection costs inside ingest, measured in the live path. Prints one JSON object.

    .venv/bin/python bench/anomaly_live.py [--steps 600] [--database-url postgres://...]

What it measures and how: docs/PERFORMANCE.md, `anomaly_live` (bench/results/anomaly_live.md).
"""

from __future__ import annotations

import math
import os
import random
import sys
import time

from harness import Stack, bench_redis_url, demo_names, django_here, parser, report

def step_values(step: int, rnd: random.Random) -> dict[str, float]:
    """One step of the demo trainer's metrics (bench/telemetry.py's names, and the host's and the publisher's as it
    publishes them; values of the right shape)."""
    loss = (1.5 + 4.0 * (1 + step / 50) ** -0.5) * (1 + rnd.uniform(-0.01, 0.01))
    v = {"train/loss": loss, "train/cross_entropy_loss": loss - 0.01, "train/aux_loss": 0.01, "train/finite": 1.0,
         "grad/norm/total": 0.4 * math.exp(rnd.gauss(0, 0.1)), "optim/update_norm": 0.8 + rnd.gauss(0, 0.02),
         "optim/learning_rate": 3e-3, "optim/lr_multiplier": 1.0, "optim/total_steps": 62_500.0,
         "params/norm/total": 120.0, "moe/drop_fraction": 0.05 * (1 + rnd.gauss(0, 0.1)),
         "throughput/tokens_per_second": 1100 * (1 + rnd.gauss(0, 0.01)), "throughput/mfu": 0.15,
         "throughput/total_tokens": 512.0 * step, "time/step_s": 0.46, "time/data_s": 0.005,
         "time/compute_s": 0.45, "time/host_s": 0.0002, "sys/publish_dropped": 0.0, "sys/publish_queue": 0.0,
         "mixture/stage": 0.0, "hw/cpu_percent": 90.0, "hw/load1": 3.0, "hw/rss_bytes": 7e8}
    for name in demo_names():  # the rest by kind: per domain, per parameter, per router layer (and expert)
        if name in v:
            continue
        v[name] = (loss * (1 + rnd.uniform(-0.03, 0.03)) if name.startswith("train/loss/") else
                   0.25 if name.startswith("mixture/weight/") else 128.0 * step if name.startswith("data/") else
                   0.05 * math.exp(rnd.gauss(0, 0.1)) if name.startswith("grad/norm/") else
                   float(round(128 * math.exp(rnd.gauss(0, 0.1)))) if "/routing_hist/" in name else
                   0.01 * int(name.rsplit("/", 1)[1]) + rnd.gauss(0, 0.001) if "/router_bias/" in name else
                   rnd.random())
    return v


def measure(client, run_id: str, steps: int, batch: int) -> dict:
    from observatory import contract
    from webapp.anomalies.detect import DETECTION
    from webapp.live.pipeline import LiveIngest

    rnd = random.Random(1)
    stream = contract.telemetry_stream(run_id)
    client.sadd(contract.RUNS_KEY, run_id)
    msgs = [contract.metrics_fields(run_id, s, step_values(s, rnd), 1.7e9 + 0.46 * s) for s in range(steps)]
    ing = LiveIngest(client, lambda run, *bodies: None, consumer="bench", batch=batch, interval=3600.0)
    ing.ingestor.renew()
    ing.ingestor.discover()
    spent = 0.0
    try:
        for i in range(0, steps, batch):
            pipe = client.pipeline(transaction=False)
            for m in msgs[i:i + batch]:
                pipe.xadd(stream, m)
            pipe.execute()
            t0 = time.perf_counter()
            ing.ingestor.process(ing.ingestor.read())
            ing.flush(force=True)  # push, then XACK
            spent += time.perf_counter() - t0
    finally:
        ing.close()
    return {"steps": steps, "batch": batch, "metrics_per_step": len(step_values(0, rnd)),
            "detector_saves": DETECTION.stats["saves"],
            "ingest_s": round(spent, 3), "hook_s": round(ing.hook_s, 3),
            "hook_share": round(ing.hook_s / spent, 4), "ingest_ms_per_step": round(spent / steps * 1000, 2),
            "hook_ms_per_step": round(ing.hook_s / steps * 1000, 3)}


def main() -> int:
    ap = parser(__doc__)
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--database-url", default=None, help="default: a throw-away SQLite file")
    args = ap.parse_args()
    if args.database_url:
        os.environ["DATABASE_URL"] = args.database_url
    with Stack("anomaly-live") as stack:  # the bench Redis database (flushed) and a migrated database
        os.environ.update({"OBS_DATA_DIR": stack.tmp, "OBS_LOG_LEVEL": "WARNING"})
        django_here(f"{stack.tmp}/bench.sqlite3", debug=False)
        import redis
        from django.db import connection

        client = redis.Redis.from_url(bench_redis_url())
        client.flushdb()
        out = {"database": connection.vendor}
        try:
            for mode, batch in (("live", 1), ("catchup", 500)):
                out[mode] = measure(client, f"bench-{mode}-{int(time.time())}", args.steps, batch)
        finally:
            client.flushdb()
            connection.close()
    return report("anomaly_live", out, args.json, not args.no_save)


if __name__ == "__main__":
    sys.exit(main())
