"""The demo trainer's telemetry without its compute, for the live-path benches (re-exported by bench/harness.py):
its metric names and values and a SyntheticTrainer publishing them at a rate (both bench/data/telemetry: they
measure nothing), what a default dashboard subscribes to, a tap on the run's live log (PushTap), each step's publish
time (publish_times) and whether ingest has read and acknowledged a run's stream (drained).
"""

from __future__ import annotations

import json
import threading
import time

from bench.data.telemetry.demo import demo_names, demo_values  # noqa: F401 (re-exported)
from bench.data.telemetry.synthetic import SyntheticTrainer, heartbeat, liveview_values, sawtooth  # noqa: F401


def dashboard_subscription(names: list[str]) -> list[str]:
    """What a browser with the default dashboard subscribes to: ~34 of the ~240 series."""
    want = {"train/loss", "train/cross_entropy_loss", "optim/learning_rate", "grad/norm/total",
            "throughput/tokens_per_second", "throughput/mfu", "moe/drop_fraction", "mixture/stage",
            "train/router/layer_0/max_mean_load", "train/router/layer_0/capacity_overflow_rate"}
    return [n for n in names if n in want or n.startswith(("train/loss/", "mixture/weight/",
                                                             "train/router/layer_0/routing_hist/"))]


class PushTap(threading.Thread):
    """Reads the run's live log like a web replica and the relay do and notes when ingest appended each step:
    splits a viewer's delay into publish -> the log (ingest) and the log -> viewer (the fan-out)."""

    def __init__(self, redis_url: str, run_id: str):
        super().__init__(daemon=True)
        import redis

        from observatory import contract

        self.r = redis.Redis.from_url(redis_url)
        self.key = contract.run_key(run_id, "live")  # webapp.live.livelog.log_key (no Django here)
        self.pushed: dict[int, float] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        cursor = "$"
        while not self.stop.is_set():
            reply = self.r.xread({self.key: cursor}, count=100, block=200)
            now = time.time()
            for _key, entries in reply or ():
                for entry_id, fields in entries:
                    cursor = entry_id
                    for frame in json.loads(fields[b"f"]):
                        for s in (frame.get("series") or {}).get("train/loss", {}).get("steps", []):
                            self.pushed.setdefault(s, now)


def publish_times(redis_url: str, run_id: str) -> dict[int, float]:
    """step -> the time its metrics entry was published (`data.t`), from the run's telemetry stream."""
    import redis

    from observatory import contract

    r = redis.Redis.from_url(redis_url, decode_responses=True)
    return {d["step"]: d["t"] for _id, f in r.xrange(contract.telemetry_stream(run_id)) if f.get("kind") == "metrics"
            for d in [json.loads(f["data"])]}


def drained(client, run_ids: list[str]) -> bool:
    """Ingest has read and acknowledged every entry of these runs' telemetry streams."""
    from observatory import contract

    for run_id in run_ids:
        try:
            groups = client.xinfo_groups(contract.telemetry_stream(run_id))
        except Exception:
            return False
        g = next((g for g in groups if g["name"] in (contract.INGEST_GROUP, contract.INGEST_GROUP.encode())), None)
        if g is None or g["pending"] or g.get("lag", 1):
            return False
    return True
