"""A synthetic run's telemetry (measures nothing; the live-path benches publish it, bench/harness.py re-exports it):
the demo trainer's per-step values without its compute (sawtooth; liveview_values: sawtooth or smooth, for
bench/liveview.py), its heartbeat, and a SyntheticTrainer publishing them at a rate through the trainer's own
Publisher."""

from __future__ import annotations

import math
import os
import threading
import time

from bench.data.telemetry.demo import demo_names
from observatory import contract


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
