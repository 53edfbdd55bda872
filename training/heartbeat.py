"""Run progress shared between the loop and a heartbeat thread that reports it every few seconds, paused or not."""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Callable

log = logging.getLogger(__name__)


class Progress:
    """What the loop is doing. Plain attribute writes from the loop; the heartbeat thread only reads."""

    def __init__(self, token_budget: int, tokens_per_step: int):
        self.phase = "starting"
        self.step = 0
        self.tokens = 0
        self.token_budget = int(token_budget)
        self.tokens_per_step = int(tokens_per_step)
        self._rate_steps_per_s = 0.0  # exponential moving average over recent steps
        self._last_t: float | None = None
        self.last_step_wall = time.time()  # when the step counter last moved (a hang shows as a growing gap)

    def stepped(self, step: int, tokens: int) -> None:
        now = time.perf_counter()
        if self._last_t is not None and step > self.step:
            inst = (step - self.step) / max(now - self._last_t, 1e-9)
            self._rate_steps_per_s = inst if self._rate_steps_per_s == 0 else 0.9 * self._rate_steps_per_s + 0.1 * inst
        self._last_t, self.step, self.tokens = now, int(step), int(tokens)
        self.last_step_wall = time.time()

    def reset_rate(self) -> None:
        """After a pause, compile or checkpoint: the next step interval is not a throughput sample."""
        self._last_t = None

    def snapshot(self) -> dict:
        sps = self._rate_steps_per_s
        left = max(0, self.token_budget - self.tokens)
        tok_s = sps * self.tokens_per_step
        eta = left / tok_s if tok_s > 0 else None
        now = time.time()
        return {"t": now, "phase": self.phase, "step": int(self.step), "tokens": int(self.tokens),
                "token_budget": self.token_budget, "eta_s": eta, "steps_per_s": sps,
                "since_step_s": now - self.last_step_wall, "pid": os.getpid()}


class Heartbeat:
    """Calls `emit(snapshot)` every `interval_s` on a daemon thread until stopped."""

    def __init__(self, progress: Progress, emit: Callable[[dict], None], interval_s: float = 2.0):
        self.progress, self._emit, self.interval_s = progress, emit, interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="heartbeat", daemon=True)

    def start(self) -> "Heartbeat":
        self._thread.start()
        return self

    def beat(self) -> None:
        try:
            self._emit(self.progress.snapshot())
        except Exception:  # a heartbeat must never take the run down
            log.exception("heartbeat failed")

    def _run(self) -> None:
        self.beat()
        while not self._stop.wait(self.interval_s):
            self.beat()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.interval_s + 1)
