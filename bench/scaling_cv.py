"""Development (cross-validated) and held-out figures for the ladder fits and their calibrated bands (issue 48).

Development ladders: the four of bench/scaling_ladders.LADDERS (Chinchilla, Gadre et al. ×3), where every earlier
choice was made. Fit options (Huber δ × compute-weight power) and band options (SIZE_FOLDS × D0 of
observatory/scaling/calibrate.py) are chosen by leave-one-ladder-out cross-validation on them: for each ladder,
the option best on the other three (fit: lowest mean held-out error; band: pooled coverage of the nominal 80%
band nearest 0.8, then the narrower) is scored on the one left out. `chosen_on_all` is the choice on all four;
the code's constants must equal it (`code_matches`). Held-out ladders (bench/data/heldout): scored with the code's
constants only, each file first verified against MANIFEST.json (bench/heldout.py); a file that fails is reported
with the reason, never with figures.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from bench import heldout, scaling_ladders
from observatory import scaling
from observatory.scaling import calibrate as cal
from observatory.scaling.fit import WEIGHT_POWER
from observatory.scaling.solver import HUBER_DELTA

FIT_OPTIONS = [(delta, power) for delta in (1e-3, 1e-2) for power in (0.0, 0.5)]
BAND_OPTIONS = [(k, d0) for k in (1, 2, 3) for d0 in (0.5, 1.0, 2.0)]
TARGET = {"mean_rel_error": 0.025, "coverage": (0.7, 0.9), "median_half_width": 0.04}


def _fit(d: dict, delta: float, power: float):
    h = d["heldout"]
    pts = scaling.Points.of(N=d["N"][~h], D=d["D"][~h], C=d["C"][~h])
    held = scaling.Points.of(N=d["N"][h], D=d["D"][h], C=d["C"][h])
    f = scaling.fit(pts, d["L"][~h], "auto", bootstrap=0, band="calibrated", delta=delta, power=power)
    return f, held, d["L"][h]


def _band(f, held, truth, size_folds: int, d0: float) -> dict:
    c = f.calibration
    s = cal.scale_of(c.errors, size_folds, d0, c.level)
    s = c.floor / d0 if s is None else s
    h = np.maximum(s * (d0 + cal.distance(held, c.n_max, c.c_max)), c.floor)
    pred = f.predict(held)
    inside = (truth >= pred * np.exp(-h)) & (truth <= pred * np.exp(h))
    return {"inside": inside.tolist(), "half_width": np.expm1(h).tolist()}


def _score(f, held, truth) -> dict:
    pred = f.predict(held)
    rel = np.abs(pred / truth - 1)
    return {"law": f.law.name, "mean_rel_error": float(rel.mean()), "max_rel_error": float(rel.max()),
            "actual": truth.tolist(), "predicted": pred.tolist()}


def _pooled(bands: list[dict]) -> dict:
    inside = [x for b in bands for x in b["inside"]]
    hw = [x for b in bands for x in b["half_width"]]
    return {"points": len(inside), "coverage": float(np.mean(inside)), "median_half_width": statistics.median(hw)}


def _pick_band(runs: dict, names: list[str]) -> tuple:
    def key(opt):
        p = _pooled([runs[n]["bands"][opt] for n in names])
        return abs(p["coverage"] - cal.LEVEL), p["median_half_width"]
    return min(BAND_OPTIONS, key=key)


def development() -> dict:
    t0 = time.perf_counter()
    names = list(scaling_ladders.LADDERS)
    runs = {}
    for name in names:
        d = scaling_ladders.load(name)
        runs[name] = {}
        for opt in FIT_OPTIONS:
            f, held, truth = _fit(d, *opt)
            runs[name][opt] = {"score": _score(f, held, truth),
                               "bands": {b: _band(f, held, truth, *b) for b in BAND_OPTIONS}}
    err = {n: {o: runs[n][o]["score"]["mean_rel_error"] for o in FIT_OPTIONS} for n in names}
    folds, cv_bands = {}, []
    for left in names:
        rest = [n for n in names if n != left]
        fo = min(FIT_OPTIONS, key=lambda o: np.mean([err[n][o] for n in rest]))
        bo = _pick_band({n: runs[n][fo] for n in names}, rest)
        band = runs[left][fo]["bands"][bo]
        cv_bands.append(band)
        folds[left] = {"fit_option": {"delta": fo[0], "power": fo[1]},
                       "band_option": {"size_folds": bo[0], "d0": bo[1]},
                       **runs[left][fo]["score"], "coverage": float(np.mean(band["inside"])),
                       "median_half_width": statistics.median(band["half_width"])}
    fo = min(FIT_OPTIONS, key=lambda o: np.mean([err[n][o] for n in names]))
    bo = _pick_band({n: runs[n][fo] for n in names}, names)
    chosen = {"delta": fo[0], "power": fo[1], "size_folds": bo[0], "d0": bo[1]}
    code = {"delta": HUBER_DELTA, "power": WEIGHT_POWER, "size_folds": cal.SIZE_FOLDS, "d0": cal.D0}
    return {"ladders": folds, "pooled_band": _pooled(cv_bands),
            "mean_rel_error_per_ladder": {n: r["mean_rel_error"] for n, r in folds.items()},
            "chosen_on_all": chosen, "code": code, "code_matches": chosen == code,
            "options": {"fit": FIT_OPTIONS, "band": BAND_OPTIONS}, "seconds": round(time.perf_counter() - t0, 1)}


def held_out(bootstrap: int = 200) -> dict:
    """The held-out ladders with the code's constants, each file verified first; beside each, the landed band
    (bootstrap percentiles widened to the held-out margin, 95%, `bootstrap` resamples) on the same points."""
    out, bands, landed = {}, [], []
    for name, (rel, _, _) in scaling_ladders.HELDOUT.items():
        path = f"bench/data/{rel}"
        v = heldout.verify(path, reporter="bench/scaling_cv.py")
        if not v["ok"]:
            out[name] = {"file": path, "refused": v["reason"]}
            continue
        d = scaling_ladders.load(name)
        f, held, truth = _fit(d, HUBER_DELTA, WEIGHT_POWER)
        lo, hi = f.interval(held)
        pred = f.predict(held)
        band = {"inside": ((truth >= lo) & (truth <= hi)).tolist(), "half_width": ((hi - lo) / 2 / pred).tolist()}
        bands.append(band)
        h = d["heldout"]
        old = scaling.fit(scaling.Points.of(N=d["N"][~h], D=d["D"][~h], C=d["C"][~h]), d["L"][~h], "auto",
                          bootstrap=bootstrap)
        olo, ohi = old.interval(held)
        landed.append({"inside": ((truth >= olo) & (truth <= ohi)).tolist(),
                       "half_width": ((ohi - olo) / 2 / old.predict(held)).tolist()})
        out[name] = {"file": path, "frozen_by": v["frozen_by"], "rungs": int((~d["heldout"]).sum()),
                     "heldout": int(d["heldout"].sum()), **_score(f, held, truth),
                     "coverage": float(np.mean(band["inside"])),
                     "median_half_width": statistics.median(band["half_width"]),
                     "low": lo.tolist(), "high": hi.tolist(),
                     "landed_band": {"coverage": float(np.mean(landed[-1]["inside"])),
                                     "median_half_width": statistics.median(landed[-1]["half_width"])}}
    scored = {n: r for n, r in out.items() if "refused" not in r}
    pooled = _pooled(bands) if bands else None
    met = None if not scored else {
        "mean_rel_error_every_ladder": all(r["mean_rel_error"] <= TARGET["mean_rel_error"] for r in scored.values()),
        "coverage": TARGET["coverage"][0] <= pooled["coverage"] <= TARGET["coverage"][1],
        "median_half_width": pooled["median_half_width"] <= TARGET["median_half_width"]}
    return {"ladders": out, "pooled_band": pooled, "landed_pooled_band": _pooled(landed) if landed else None,
            "target": TARGET, "met": met,
            "refused": sorted(n for n, r in out.items() if "refused" in r)}
