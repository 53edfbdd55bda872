"""Synthetic ladders for bench/scaling.py's fit timings (they measure nothing): rungs from 3e7 to 3e9 parameters at
four tokens-per-parameter ratios, and each law's loss at known parameters (TRUTHS) with 0.3% log-normal noise."""

from __future__ import annotations

import numpy as np

from observatory.scaling import CHINCHILLA, COMPUTE, OVERTRAINED, Points

TRUTHS = {
    "chinchilla": (CHINCHILLA, {"E": 1.82, "A": 482.01, "B": 2085.43, "alpha": 0.3478, "beta": 0.3658}),
    "compute": (COMPUTE, {"E": 1.6, "A": 95.18, "alpha": 0.0941}),
    "overtrained": (OVERTRAINED, {"E": 1.7, "A": 400.0, "B": 2000.0, "alpha": 0.34, "beta": 0.30, "gamma": 0.03}),
}


def synthetic_ladder(rungs: int) -> Points:
    """max(2, rungs // 4) sizes, each at 10, 40, 160 and 640 tokens per parameter."""
    sizes = max(2, rungs // 4)
    N = np.repeat(np.geomspace(3e7, 3e9, sizes), 4)
    return Points.of(N=N, D=N * np.tile([10.0, 40.0, 160.0, 640.0], sizes))


def synthetic_losses(pts: Points, seed: int = 0) -> dict[str, tuple]:
    """Each law's name -> (law, its true parameters, its noisy loss at pts), in TRUTHS' order from one generator."""
    rng = np.random.default_rng(seed)
    return {name: (law, truth, law.predict(law.theta_of(truth), pts) * np.exp(rng.normal(0, 0.003, len(pts))))
            for name, (law, truth) in TRUTHS.items()}
