"""A candidate correction for the forecasts' over-forecast, fixed before the fourth held-out set is scored (issue 48;
docs/SCALING.md, "The over-forecast, second diagnosis"). Not the library's rule: this scores it beside it.

    .venv/bin/python bench/data/heldout/drift_candidate.py --dev    # the ladders already scored (development)
    .venv/bin/python bench/data/heldout/drift_candidate.py --set4   # heldout/ladders4, each file verified first

The rule, fixed here (no parameter): fit a ladder's fitted rows as bench/scaling_cv.py does (auto law, landed fit
options, calibrated band); refit the chosen law on each rolling-origin fold the band uses (calibrate.folds: the 1-2
largest model sizes, keeping >= MIN_KEPT_SIZES for a law with an N term; the largest n // 8 and n // 4 rows in
compute) and record each removed rung's SIGNED log error e = ln(L̂ / L) with its distance d from the rungs kept;
drift b = Σ e·d / Σ d² (least squares through the origin, the rungs with d > 0); the corrected forecast at distance
d from the fitted rungs is L̂·exp(−b·d), its band the calibrated band's half-width about it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from bench import heldout  # noqa: E402
from bench.data.ladders.ladders import HELDOUT, HELDOUT_SETS, LADDERS, load  # noqa: E402
from bench.scaling_cv import _fit  # noqa: E402
from observatory import scaling  # noqa: E402
from observatory.scaling import calibrate as cal  # noqa: E402
from observatory.scaling.fit import WEIGHT_POWER  # noqa: E402
from observatory.scaling.solver import HUBER_DELTA  # noqa: E402

SET4 = "heldout/ladders4"


def drift(f) -> float:
    """b of the rule above for a fit `f` (its law refitted on each fold of its own rungs)."""
    pts, loss, law = f.points, f.loss, f.law
    es, ds = [], []
    for _, held in cal.folds(pts, cal.SIZE_FOLDS, cal.MIN_KEPT_SIZES if "N" in law.needs else 1):
        if (~held).sum() < law.n_params:
            continue
        kept = pts.take(~held)
        g = scaling.fit_law(law, kept, loss[~held], bootstrap=0, _held=None)
        es += np.log(g.predict(pts.take(held)) / loss[held]).tolist()
        n_max = None if kept.N is None else float(kept.N.max())
        ds += cal.distance(pts.take(held), n_max, float(kept.C.max())).tolist()
    e, d = np.array(es), np.array(ds)
    return float(np.sum(e * d) / np.sum(d * d)) if np.any(d > 0) else 0.0


def score(name: str) -> dict:
    f, held, truth = _fit(load(name), HUBER_DELTA, WEIGHT_POWER)
    c, b = f.calibration, drift(f)
    d, h, pred = cal.distance(held, c.n_max, c.c_max), c.half_width(held), f.predict(held)
    out = {"law": f.law.name, "drift_per_efold": b, "points": len(truth), "distance": d.tolist()}
    for key, p in (("landed", pred), ("corrected", pred * np.exp(-b * d))):
        e = np.log(p / truth)
        out[key] = {"mean_rel_error": float(np.mean(np.abs(np.expm1(e)))), "signed": np.expm1(e).tolist(),
                    "inside": (np.abs(e) <= h).tolist(), "half_width": np.expm1(h).tolist()}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--dev", action="store_true", help="development: LADDERS and the spent held-out sets")
    g.add_argument("--set4", action="store_true", help="the fourth held-out set (verified against MANIFEST.json)")
    a = ap.parse_args()
    if a.dev:
        names = list(LADDERS) + [n for s, ns in HELDOUT_SETS.items() if s != SET4 for n in ns]
    else:
        names = list(HELDOUT_SETS[SET4])
        for n in names:
            v = heldout.verify(f"bench/data/{HELDOUT[n][0]}", reporter="bench/data/heldout/drift_candidate.py")
            if not v["ok"]:
                raise SystemExit(f"refused: {v['reason']}")
    res = {n: score(n) for n in names}
    pooled = {k: {"coverage": float(np.mean([x for r in res.values() for x in r[k]["inside"]])),
                  "median_half_width": float(np.median([x for r in res.values() for x in r[k]["half_width"]])),
                  "ladders_over_2.5%": sum(r[k]["mean_rel_error"] > 0.025 for r in res.values()),
                  "mean_of_ladder_means": float(np.mean([r[k]["mean_rel_error"] for r in res.values()]))}
              for k in ("landed", "corrected")}
    print(json.dumps({"ladders": res, "pooled": pooled}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
