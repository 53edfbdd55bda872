"""Learning-rate schedule over the token budget, re-plannable mid-run without a jump in the learning rate.

The plan is a piecewise-linear curve of LR ratios through a few knots (step, ratio), evaluated in Python for
the current step; the trainer passes the LR into the jitted step as an argument, so a re-plan never recompiles.
"""

from __future__ import annotations

import math
from typing import Mapping

import numpy as np

from observatory import contract
from training.config import TrainSection
from training.errors import ConfigError

MAX_KNOTS = 16  # fixed-size state so orbax restores into a template; a fresh plan needs at most 4


class Schedule:
    """lr(step) = train.lr * ratio(step) * multiplier, with ratio linear between knots and flat after the last.

    The shape comes from the [train] section: `schedule` (linear or wsd), `warmup_ratio`, `decay_ratio` (wsd)
    and `min_lr_ratio`, each a share of the planned steps.
    """

    def __init__(self, cfg: TrainSection, total_steps: int):
        self.cfg = cfg
        self.total_steps = int(total_steps)
        self.multiplier = 1.0
        self.replans = 0
        self.warmup_steps = int(round(cfg.warmup_ratio * total_steps))
        self.knots: list[tuple[int, float]] = self._plan(0, 0.0 if self.warmup_steps else 1.0, total_steps)

    def _plan(self, step: int, ratio: float, end: int) -> list[tuple[int, float]]:
        """Knots from (step, ratio) to (end, min_lr_ratio) following the configured kind."""
        knots = [(step, ratio)]
        w = self.warmup_steps
        if step < w < end:  # still warming up: finish the warmup as planned, then decay
            knots.append((w, 1.0))
            step, ratio = w, 1.0
        if self.cfg.schedule == "wsd":
            decay_start = end - int(round(self.cfg.decay_ratio * end))
            if step < decay_start < end and ratio == 1.0:
                knots.append((decay_start, 1.0))
        knots.append((end, self.cfg.min_lr_ratio))
        return knots

    # -- evaluation
    def ratio(self, step: int) -> float:
        xs = [k[0] for k in self.knots]
        ys = [k[1] for k in self.knots]
        return float(np.interp(step, xs, ys))  # flat before the first knot and after the last (min ratio)

    def lr(self, step: int) -> float:
        return self.cfg.lr * self.ratio(step) * self.multiplier

    def metrics(self) -> dict[str, float]:
        return {contract.M_LR_MULT: self.multiplier, contract.M_TOTAL_STEPS: float(self.total_steps)}

    def describe(self) -> dict:
        return {"kind": self.cfg.schedule, "peak_lr": self.cfg.lr, "total_steps": self.total_steps,
                "warmup_steps": self.warmup_steps, "min_lr_ratio": self.cfg.min_lr_ratio,
                "multiplier": self.multiplier, "knots": [[s, r] for s, r in self.knots]}

    # -- operator commands (each returns an event payload)
    def replan(self, current_step: int, new_total_steps: int) -> dict:
        """Re-plan the decay from current_step to a new end; the LR at current_step is unchanged."""
        if new_total_steps <= current_step:
            raise ConfigError("token_budget", f"new end step {new_total_steps} must be after the current step "
                                              f"{current_step}")
        old = self.describe()
        lr_before = self.lr(current_step)
        # Past knots stay (so lr() of earlier steps still answers) while they fit in the fixed-size state.
        past = [k for k in self.knots if k[0] < current_step]
        self.knots = (past + self._plan(current_step, self.ratio(current_step), new_total_steps))[-MAX_KNOTS:]
        self.total_steps = int(new_total_steps)
        self.replans += 1
        return {"step": current_step, "old": old, "new": self.describe(), "lr_before": lr_before,
                "lr_after": self.lr(current_step), "lr_at_new_end": self.lr(new_total_steps)}

    def set_multiplier(self, multiplier: float) -> dict:
        if isinstance(multiplier, bool) or not isinstance(multiplier, (int, float)) \
                or not math.isfinite(multiplier) or not 0 <= multiplier <= 1000:
            raise ConfigError("lr_multiplier", f"must be a number in [0, 1000], got {multiplier!r}")
        old, self.multiplier = self.multiplier, float(multiplier)
        return {"old": old, "new": self.multiplier}

    # -- checkpointing: fixed-shape arrays
    def state_dict(self) -> dict:
        steps = np.zeros(MAX_KNOTS, dtype=np.int64)
        ratios = np.zeros(MAX_KNOTS, dtype=np.float64)
        for i, (s, r) in enumerate(self.knots):
            steps[i], ratios[i] = s, r
        return {"knot_steps": steps, "knot_ratios": ratios, "n_knots": np.int64(len(self.knots)),
                "total_steps": np.int64(self.total_steps), "warmup_steps": np.int64(self.warmup_steps),
                "multiplier": np.float64(self.multiplier), "replans": np.int64(self.replans)}

    def load_state_dict(self, state: Mapping) -> None:
        n = int(state["n_knots"])
        steps, ratios = np.asarray(state["knot_steps"]), np.asarray(state["knot_ratios"])
        self.knots = [(int(steps[i]), float(ratios[i])) for i in range(n)]
        self.total_steps = int(state["total_steps"])
        self.warmup_steps = int(state["warmup_steps"])
        self.multiplier = float(state["multiplier"])
        self.replans = int(state["replans"])
