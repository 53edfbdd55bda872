"""Public scaling ladders with held-out larger runs (bench/data/ladders/README.md), and how a law forecasts them:
the library of `bench/scaling.py --public-only` (the `scaling_ladders` topic) and bench/scaling_cv.py.

What it measures and how: docs/PERFORMANCE.md, `scaling_ladders` (bench/results/scaling_ladders.md).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.append(str(Path(__file__).resolve().parent.parent))  # (after a --core tree: the checkout's bench.data)
from stack import run_landed  # noqa: E402

from bench.data.ladders.ladders import HELDOUT, LADDERS, load  # noqa: E402,F401 (the data: bench/data/ladders)


def evaluate(scaling, name: str, laws=("chinchilla", "compute", "overtrained", "auto"), bootstrap: int = 200,
             seed: int = 0, starts: int = 64) -> dict:
    """Per law: held-out mean/max relative error, band coverage, and each held-out run's forecast."""
    d = load(name)
    h = d["heldout"]
    fit_pts = scaling.Points.of(N=d["N"][~h], D=d["D"][~h], C=d["C"][~h])
    held = scaling.Points.of(N=d["N"][h], D=d["D"][h], C=d["C"][h])
    truth = d["L"][h]
    out = {"file": d["file"], "rungs": int((~h).sum()), "heldout": int(h.sum()),
           "compute_ratio": float(d["C"][h].max() / d["C"][~h].max()), "laws": {}}
    for law in laws:
        t0 = time.perf_counter()
        f = scaling.fit(fit_pts, d["L"][~h], law, bootstrap=bootstrap, seed=seed, starts=starts)
        pred = f.predict(held)
        lo, hi = f.interval(held)
        rel = np.abs(pred / truth - 1)
        row = {"mean_rel_error": float(rel.mean()), "max_rel_error": float(rel.max()),
               "coverage": float(np.mean((truth >= lo) & (truth <= hi))),
               "band_width": float(np.mean((hi - lo) / pred)),   # mean (high − low) / L̂: what the coverage cost
               "actual": truth.tolist(), "predicted": pred.tolist(), "low": lo.tolist(), "high": hi.tolist(),
               "seconds": round(time.perf_counter() - t0, 2)}
        if law == "auto":
            row["chosen"] = f.law.name
        out["laws"][law] = row
    return out


def evaluate_all(scaling, bootstrap: int = 200, seed: int = 0, starts: int = 64) -> dict:
    return {name: evaluate(scaling, name, bootstrap=bootstrap, seed=seed, starts=starts) for name in LADDERS}


def landed(ref: str, bootstrap: int = 200, seed: int = 0) -> dict:
    """The same evaluation of the core at git `ref` (e.g. the merge base), in a subprocess on its own checkout
    of observatory/ (bench/stack.py), so that both are measured in one run on the same machine."""
    out = run_landed(ref, Path(__file__).resolve().parent / "scaling.py", "--ladders-bootstrap", str(bootstrap),
                     "--seed", str(seed))
    if "error" in out:
        raise SystemExit(f"the landed ladders ({ref}): {out['error']}")
    return {k: v for k, v in out.items() if k not in ("ref", "commit")}


def summary(ladders: dict, target_error: float = 0.03, target_coverage: float = 0.8) -> dict:
    """Per ladder, the `auto` law's numbers; and how many ladders meet issue 27's bar (mean ≤ 3%, coverage ≥ 80%)."""
    rows = {name: {k: r["laws"]["auto"].get(k) for k in ("chosen", "mean_rel_error", "max_rel_error", "coverage",
                                                          "band_width")}
            for name, r in ladders.items()}
    ok = [n for n, r in rows.items() if r["mean_rel_error"] <= target_error and r["coverage"] >= target_coverage]
    return {"auto": rows, "ladders_meeting_target": ok, "target": {"mean_rel_error": target_error,
                                                                    "coverage": target_coverage}}
