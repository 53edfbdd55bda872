"""Scaling-law fits: wall time per law, and the pruned multi-start against the full grid. Prints one JSON object.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/scaling.py [--bootstrap 200] [--rungs 24] [--full-grid]

Synthetic ladders (Chinchilla with Besiroglu et al.'s estimates, 0.3% noise; the Marin compute law; the
over-trained form with γ = 0.03). For each law: seconds for one fit with `--bootstrap` resamples and its
held-out error. With --full-grid, also refines every point of Chinchilla's 4500-point grid (seconds) and reports
how far the default 64-start optimum is from it (relative objective; 0 means the same optimum).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from observatory.scaling import CHINCHILLA, COMPUTE, OVERTRAINED, Points, fit_law  # noqa: E402
from observatory.scaling.solver import best_grid_starts, solve  # noqa: E402

TRUTHS = {
    "chinchilla": (CHINCHILLA, {"E": 1.82, "A": 482.01, "B": 2085.43, "alpha": 0.3478, "beta": 0.3658}),
    "compute": (COMPUTE, {"E": 1.6, "A": 95.18, "alpha": 0.0941}),
    "overtrained": (OVERTRAINED, {"E": 1.7, "A": 400.0, "B": 2000.0, "alpha": 0.34, "beta": 0.30, "gamma": 0.03}),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", type=int, default=200)
    ap.add_argument("--rungs", type=int, default=24, help="rungs: sizes × 4 tokens-per-parameter ratios")
    ap.add_argument("--full-grid", action="store_true")
    args = ap.parse_args()
    sizes = max(2, args.rungs // 4)
    N = np.repeat(np.geomspace(3e7, 3e9, sizes), 4)
    pts = Points.of(N=N, D=N * np.tile([10.0, 40.0, 160.0, 640.0], sizes))
    rng = np.random.default_rng(0)
    out = {"rungs": len(pts), "bootstrap": args.bootstrap, "laws": {}}
    for name, (law, truth) in TRUTHS.items():
        loss = law.predict(law.theta_of(truth), pts) * np.exp(rng.normal(0, 0.003, len(pts)))
        t0 = time.perf_counter()
        f = fit_law(law, pts, loss, bootstrap=args.bootstrap)
        out["laws"][name] = {"seconds": round(time.perf_counter() - t0, 3), "holdout_error": f.holdout_error,
                             "params": f.params, "truth": truth}
        if args.full_grid and name == "chinchilla":
            X, y = law.design(pts), np.log(loss)
            t0 = time.perf_counter()
            _, full = solve(law, X, y, best_grid_starts(law, X, y, None))
            seconds = time.perf_counter() - t0
            _, pruned = solve(law, X, y, best_grid_starts(law, X, y, 64))
            out["full_grid"] = {"starts": len(law.grid_points()), "seconds": round(seconds, 3),
                                "pruned_minus_full_relative": float(pruned.min() / full.min() - 1)}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
