"""The demo trainer's telemetry without its compute, for the live-path benches (re-exported by bench/harness.py):
its per-step metric names (training/configs/demo.toml: 4 layers, 16 experts, 4 domains), a
SyntheticTrainer publishing them at a rate through the trainer's own Publisher, what a default dashboard subscribes
to, a tap on the run's live log (PushTap), each step's publish time and whether ingest has drained a run's stream.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time

from observatory import contract


DOMAINS = ("docs_text", "docstrings", "licenses", "python_stdlib")
LAYERS, EXPERTS = 4, 16


def demo_names() -> list[str]:
    """The demo trainer's per-step metric names (training/configs/demo.toml), as a run of it publishes them."""
    names = ["grad/norm/embed", "grad/norm/final_norm", "grad/norm/total", "params/norm/total", "moe/drop_fraction",
             "optim/learning_rate", "optim/lr_multiplier", "optim/total_steps", "optim/update_norm", "mixture/stage",
             "throughput/mfu", "throughput/tokens_per_second", "throughput/total_tokens", "time/compute_s",
             "time/data_s", "time/host_s", "time/step_s", "train/aux_loss", "train/cross_entropy_loss",
             "train/finite", "train/loss"]
    names += [f"{p}/{d}" for d in DOMAINS for p in ("data/tokens_seen", "mixture/weight", "train/loss")]
    for i in range(LAYERS):
        names += [f"grad/norm/layers/{i}/{w}" for w in (
            "attn_norm", "mlp_norm", "moe/experts/w_down", "moe/experts/w_gate", "moe/experts/w_up", "moe/router",
            "moe/shared/w_down", "moe/shared/w_gate", "moe/shared/w_up", "wk", "wo", "wq", "wv")]
        r = f"train/router/layer_{i}/"
        names += [r + w for w in ("capacity_overflow_rate", "load_balancing_loss", "max_mean_load",
                                  "router_z_loss", "routing_entropy")]
        names += [f"{r}{w}/{e}" for w in ("router_bias", "routing_hist") for e in range(EXPERTS)]
    return names


def sawtooth(step: int, names: list[str]) -> dict[str, float]:
    """A synthetic step: every series falls from 1 to 1/97 and jumps back, out of phase; the loss decays."""
    vals = {n: 1.0 / (1 + (step + i) % 97) for i, n in enumerate(names)}
    vals["train/loss"] = 5.0 / (1 + step / 100)
    return vals


def heartbeat(pub, step: int, rate: float) -> None:
    """The trainer's heartbeat (training/heartbeat.py's snapshot): its phase, step and rate."""
    pub.publish("heartbeat", {"phase": "training", "step": step, "tokens": step * 4096, "token_budget": 10**9,
                              "eta_s": None, "steps_per_s": rate, "since_step_s": 0.0, "pid": os.getpid()})


def liveview_values(step: int, names: list[str], data: str = "sawtooth") -> dict[str, float]:
    """sawtooth: every series but the loss falls from 1 to 1/97 and jumps back, out of phase (some series jumps 97x
    at nearly every step: the anomaly detectors open or close an episode almost every step, and the charts' marks
    change with them); smooth: slow waves with 1% noise, no spikes (a healthy run's telemetry)."""
    out = sawtooth(step, names) if data == "sawtooth" else {
        n: 1.0 + 0.2 * math.sin(step / 200 + i) + 0.01 * (((step + i) * 7919) % 13) / 13 for i, n in enumerate(names)}
    out[contract.M_LOSS] = 2.0 + 3.0 / (1 + step / 100) + 0.05 * ((step * 7919) % 13) / 13
    return out


class SyntheticTrainer(threading.Thread):
    """The demo trainer's telemetry without its compute: run/state/heartbeat messages and one full-width metrics
    record per step at `rate` steps/s, through the trainer's own Publisher."""

    def __init__(self, redis_url: str, run_id: str, rate: float):
        super().__init__(daemon=True)
        from observatory.streams import Publisher

        self.pub = Publisher(redis_url, run_id)
        self.rate, self.names = rate, demo_names()
        self.stop = threading.Event()
        self.step = -1

    def run(self) -> None:
        self.pub.publish("run", {"name": "fanout bench", "config": {}})
        self.pub.publish("state", {"state": "training", "step": 0, "detail": ""})
        t0, k = time.monotonic(), 0
        while not self.stop.is_set():
            k += 1
            self.stop.wait(max(0.0, t0 + k / self.rate - time.monotonic()))
            self.step += 1
            self.pub.metrics(self.step, sawtooth(self.step, self.names))
            if self.step % int(2 * self.rate) == 0:
                heartbeat(self.pub, self.step, self.rate)
        self.pub.close()


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

    r = redis.Redis.from_url(redis_url, decode_responses=True)
    return {d["step"]: d["t"] for _id, f in r.xrange(contract.telemetry_stream(run_id)) if f.get("kind") == "metrics"
            for d in [json.loads(f["data"])]}


def drained(client, run_ids: list[str]) -> bool:
    """Ingest has read and acknowledged every entry of these runs' telemetry streams."""
    for run_id in run_ids:
        try:
            groups = client.xinfo_groups(contract.telemetry_stream(run_id))
        except Exception:
            return False
        g = next((g for g in groups if g["name"] in (contract.INGEST_GROUP, contract.INGEST_GROUP.encode())), None)
        if g is None or g["pending"] or g.get("lag", 1):
            return False
    return True
