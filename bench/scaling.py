"""Scaling-law fits: wall time per law, the pruned multi-start against the full grid, and the forecast error of
the largest run from the smaller ones on real ladders. Prints one JSON object.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/scaling.py --json [--bootstrap 200] [--rungs 24] [--full-grid]
        [--ladder var/ladder/demo-scaling/rungs.csv] [--public-only] [--ladders-bootstrap 200] [--compare REF]
    .venv/bin/python bench/scaling.py --public-only --json    # the public ladders alone: the `scaling_ladders` topic

What it measures and how: docs/PERFORMANCE.md, `scaling` (bench/results/scaling.md).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
# --core DIR: the observatory package found in DIR (bench/stack.py run_landed: the landed code's ladders, as JSON)
_CORE = next((sys.argv[i + 1] for i, a in enumerate(sys.argv[:-1]) if a == "--core"), None)
sys.path[:0] = [_CORE, str(ROOT)] if _CORE else [str(ROOT)]

from observatory.scaling import CHINCHILLA, COMPUTE, LAWS, OVERTRAINED, Points, fit_law  # noqa: E402
from observatory.scaling.fit import holdout_mask  # noqa: E402
from observatory.scaling.cli import read_rungs  # noqa: E402
from bench import scaling_ladders  # noqa: E402
from bench.harness import parser, report  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "scaling"
CHINCHILLA_CSV = DATA / "chinchilla_svg_extracted_data.csv"
CHINCHILLA_URL = ("https://github.com/epoch-research/analyzing-chinchilla/blob/"
                  "92258837425e1b5f2851d624287f0120583a3d0e/data/svg_extracted_data.csv")
from observatory.scaling.solver import best_grid_starts, solve  # noqa: E402

TRUTHS = {
    "chinchilla": (CHINCHILLA, {"E": 1.82, "A": 482.01, "B": 2085.43, "alpha": 0.3478, "beta": 0.3658}),
    "compute": (COMPUTE, {"E": 1.6, "A": 95.18, "alpha": 0.0941}),
    "overtrained": (OVERTRAINED, {"E": 1.7, "A": 400.0, "B": 2000.0, "alpha": 0.34, "beta": 0.30, "gamma": 0.03}),
}


def forecast_errors(points: Points, loss: np.ndarray) -> dict:
    """Per law that the columns allow: the largest run (and the largest quarter) forecast from the rest."""
    out = {}
    for name, law in LAWS.items():
        if not points.has(law.needs):
            continue
        row = {}
        for label, k in (("largest", 1), ("largest_quarter", max(1, len(loss) // 4))):
            held = holdout_mask(points, k)
            if (~held).sum() < law.n_params:
                row[label] = None
                continue
            t0 = time.perf_counter()
            # _held=None: skip fit_law's own held-out refit (this loop is the held-out evaluation)
            f = fit_law(law, points.take(~held), loss[~held], bootstrap=0, _held=None)
            pred = f.predict(points.take(held))
            row[label] = {"held_out": int(held.sum()), "fitted_on": int((~held).sum()),
                          "mean_abs_rel_error": float(np.mean(np.abs(pred / loss[held] - 1))),
                          "seconds": round(time.perf_counter() - t0, 3)}
            if k == 1:
                row[label].update(actual=loss[held].tolist(), predicted=pred.tolist(), params=f.params)
        out[name] = row
    return out


def public(ladder_csv: Path | None) -> dict:
    out = {}
    cols = read_rungs(str(CHINCHILLA_CSV), {"N": "Model Size", "C": "Training FLOP", "L": "loss"})
    pts = Points.of(N=cols["N"], D=cols["C"] / (6 * cols["N"]), C=cols["C"])
    out["chinchilla_hoffmann2022"] = {"source": CHINCHILLA_URL, "rows": len(pts), "laws": forecast_errors(pts,
                                                                                                         cols["L"])}
    if ladder_csv is not None and ladder_csv.exists():
        cols = read_rungs(str(ladder_csv), {})
        pts = Points.of(N=cols["N"], D=cols["D"], C=cols["C"])
        out["demo_ladder"] = {"source": str(ladder_csv), "rows": len(pts), "N": cols["N"].tolist(),
                              "D": cols["D"].tolist(), "C": cols["C"].tolist(), "loss": cols["L"].tolist(),
                              "laws": forecast_errors(pts, cols["L"])}
    return out


def main() -> None:
    if "--demo" in sys.argv[1:]:  # the demo ladder run end to end: bench/scaling_demo.py
        from scaling_demo import main as demo_main

        sys.exit(demo_main([a for a in sys.argv[1:] if a != "--demo"]))
    ap = parser(__doc__)
    ap.add_argument("--bootstrap", type=int, default=200)
    ap.add_argument("--rungs", type=int, default=24, help="rungs: sizes × 4 tokens-per-parameter ratios")
    ap.add_argument("--full-grid", action="store_true")
    ap.add_argument("--ladder", type=Path, default=Path("var/ladder/demo-scaling/rungs.csv"),
                    help="a ladder's rungs.csv (python -m training ladder writes one); skipped when absent")
    ap.add_argument("--public-only", action="store_true", help="only the real ladders (no synthetic timings)")
    ap.add_argument("--ladders-bootstrap", type=int, default=200, help="bootstrap fits per law on the public ladders")
    ap.add_argument("--compare", metavar="REF", help="also measure the core at this git ref on the public ladders")
    ap.add_argument("--no-cv", action="store_true", help="leave out the development and held_out blocks")
    ap.add_argument("--seed", type=int, default=0, help="the public ladders' bootstrap seed")
    ap.add_argument("--core", help="print the public ladders' evaluation of the observatory package in CORE only")
    args = ap.parse_args()
    if args.core:  # the landed side of --compare (scaling_ladders.landed)
        from observatory import scaling

        print(json.dumps(scaling_ladders.evaluate_all(scaling, args.ladders_bootstrap, args.seed)))
        return 0
    if args.public_only:
        return report("scaling_ladders", {"public": public(args.ladder), **ladders(args)}, args.json, not args.no_save)
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
    out["public"] = public(args.ladder)
    out.update(ladders(args))
    return report("scaling", out, args.json, not args.no_save)


def ladders(args) -> dict:
    from observatory import scaling
    out = {}
    if not args.no_cv:
        from bench import scaling_cv
        out["development"] = scaling_cv.development()
        out["held_out"] = scaling_cv.held_out()
    out["ladders"] = scaling_ladders.evaluate_all(scaling, args.ladders_bootstrap, args.seed)
    out["ladders_summary"] = scaling_ladders.summary(out["ladders"])
    if args.compare:
        out["ladders_landed"] = scaling_ladders.landed(args.compare, args.ladders_bootstrap, args.seed)
        out["ladders_landed_summary"] = {"ref": args.compare, **scaling_ladders.summary(out["ladders_landed"])}
    return out


if __name__ == "__main__":
    sys.exit(main())
