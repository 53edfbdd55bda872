"""Development (cross-validated) and held-out figures for the ladder fits and their calibrated bands (issue 48).

Development ladders: the four of bench/scaling_ladders.LADDERS (Chinchilla, Gadre et al. ×3), where every earlier
choice was made. Fit options (Huber δ × compute-weight power) are chosen by leave-one-ladder-out cross-validation on
them: for each ladder, the option with the lowest mean held-out error on the other three is scored on the one left
out. The band (observatory/scaling/calibrate.py) has no option chosen here: SIZE_FOLDS and D0 were fixed by an
earlier round of this CV, and its pooled prior is computed from development fold errors by the rule in code; each
left-out ladder's band uses the prior pooled from the other three. `chosen_on_all` (fit option, prior from all
four) is compared with the code's constants (`code_matches`) on this machine's OpenBLAS kernel (`blas_core`), and
`provenance` recomputes the prior in a child process on the kernel POOLED was computed with (PROVENANCE_CORE):
the prior depends on the kernel, because the Gadre ladders' N2 fold refits tie exactly between optima that
forecast differently and rounding picks one (docs/SCALING.md, "The pooled prior's provenance"). Held-out ladders
(bench/data/heldout): scored with the code's constants only, each file first verified against MANIFEST.json
(bench/heldout.py); a file that fails is reported with the reason, never with figures.
"""

from __future__ import annotations

import ctypes
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from bench import heldout, scaling_ladders
from observatory import scaling
from observatory.scaling import calibrate as cal
from observatory.scaling.fit import WEIGHT_POWER
from observatory.scaling.solver import HUBER_DELTA

FIT_OPTIONS = [(delta, power) for delta in (1e-3, 1e-2) for power in (0.0, 0.5)]
BAND = (cal.SIZE_FOLDS, cal.D0)  # rule 2's folds and D0, as in code (not chosen here)
TARGET = {"mean_rel_error": 0.025, "coverage": (0.7, 0.9), "median_half_width": 0.04}
FRESH = "heldout/ladders2"  # frozen after this file existed: its files count from this file's first commit naming it
# The OpenBLAS kernel the box that computed POOLED ran (2026-12-07, before 07:48Z; the box since then runs SkylakeX):
# on it the code reproduces POOLED to the last bit, on SkylakeX it gives S 1.68%, M2 0.710 (docs/SCALING.md).
PROVENANCE_CORE = "Haswell"
ROOT = Path(__file__).resolve().parent.parent


def _fit(d: dict, delta: float, power: float):
    h = d["heldout"]
    pts = scaling.Points.of(N=d["N"][~h], D=d["D"][~h], C=d["C"][~h])
    held = scaling.Points.of(N=d["N"][h], D=d["D"][h], C=d["C"][h])
    f = scaling.fit(pts, d["L"][~h], "auto", bootstrap=0, band="calibrated", delta=delta, power=power)
    return f, held, d["L"][h]


def _band(f, held, truth, size_folds: int, d0: float, prior) -> dict:
    h = f.calibration.under(size_folds, d0, prior).half_width(held)
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


def _prior(runs: dict, fo, pool: list[str]):
    """Rule 3's prior pooled from the development ladders `pool` only (their fits under fit option fo)."""
    return cal.pooled_prior([runs[n][fo]["fit"][0].calibration.errors for n in pool], *BAND)


def development() -> dict:
    t0 = time.perf_counter()
    names = list(scaling_ladders.LADDERS)
    runs = {}
    for name in names:
        d = scaling_ladders.load(name)
        runs[name] = {}
        for opt in FIT_OPTIONS:
            f, held, truth = _fit(d, *opt)
            runs[name][opt] = {"score": _score(f, held, truth), "fit": (f, held, truth)}
    err = {n: {o: runs[n][o]["score"]["mean_rel_error"] for o in FIT_OPTIONS} for n in names}
    folds, cv_bands = {}, []
    for left in names:
        rest = [n for n in names if n != left]
        fo = min(FIT_OPTIONS, key=lambda o: np.mean([err[n][o] for n in rest]))
        prior = _prior(runs, fo, rest)                  # the left-out ladder is not in its own prior
        band = _band(*runs[left][fo]["fit"], *BAND, prior)
        cv_bands.append(band)
        folds[left] = {"fit_option": {"delta": fo[0], "power": fo[1]}, "prior": asdict(prior),
                       **runs[left][fo]["score"], "coverage": float(np.mean(band["inside"])),
                       "median_half_width": statistics.median(band["half_width"])}
    fo = min(FIT_OPTIONS, key=lambda o: np.mean([err[n][o] for n in names]))
    p = _prior(runs, fo, names)
    chosen = {"delta": fo[0], "power": fo[1], "prior": [float(f"{p.scale:.3g}"), float(f"{p.m2:.3g}"), p.weight]}
    code = {"delta": HUBER_DELTA, "power": WEIGHT_POWER, "prior": [cal.POOLED.scale, cal.POOLED.m2, cal.POOLED.weight]}
    core = blas_core()
    ref = {"blas_core": core, "prior": asdict(p)} if core == PROVENANCE_CORE else prior_on_core(PROVENANCE_CORE, fo)
    ref_prior = None if "prior" not in ref else [float(f"{ref['prior'][k]:.3g}") for k in ("scale", "m2")] + [
        ref["prior"]["weight"]]
    provenance = {"wanted_core": PROVENANCE_CORE, **ref,
                  "code_matches": ref.get("blas_core") == PROVENANCE_CORE and ref_prior == code["prior"]}
    return {"ladders": folds, "pooled_band": _pooled(cv_bands), "band": {"size_folds": BAND[0], "d0": BAND[1]},
            "mean_rel_error_per_ladder": {n: r["mean_rel_error"] for n, r in folds.items()},
            "chosen_on_all": chosen, "code": code, "code_matches": chosen == code, "pooled_prior": asdict(p),
            "blas_core": core, "provenance": provenance,
            "options": {"fit": FIT_OPTIONS}, "seconds": round(time.perf_counter() - t0, 1)}


def blas_core() -> str:
    """The kernel numpy's OpenBLAS runs ("Haswell", "SkylakeX", ...: OPENBLAS_CORETYPE picks one at start-up);
    "unknown" where numpy's BLAS is not an OpenBLAS this can find."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return "unknown"
    for path in dict.fromkeys(ln.split()[-1] for ln in maps.splitlines() if "openblas" in ln.split()[-1].lower()):
        lib = ctypes.CDLL(path)
        for sym in ("scipy_openblas_get_corename64_", "scipy_openblas_get_corename", "openblas_get_corename64_",
                    "openblas_get_corename"):
            if hasattr(lib, sym):
                getattr(lib, sym).restype = ctypes.c_char_p
                return getattr(lib, sym)().decode()
    return "unknown"


def pooled_prior_all(fo: tuple[float, float]) -> dict:
    """Rule 3's prior from all four development ladders' fits under fit option fo, and the kernel it ran on."""
    errors = [_fit(scaling_ladders.load(n), *fo)[0].calibration.errors for n in scaling_ladders.LADDERS]
    return {"blas_core": blas_core(), "prior": asdict(cal.pooled_prior(errors, *BAND))}


def prior_on_core(core: str, fo: tuple[float, float]) -> dict:
    """pooled_prior_all(fo) in a child process whose OpenBLAS runs the `core` kernel (its `blas_core` says whether
    it could: a machine without that kernel's instructions runs another); {"error"} if the child failed."""
    code = f"import json; from bench import scaling_cv as s; print(json.dumps(s.pooled_prior_all({tuple(fo)!r})))"
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       env={**os.environ, "OPENBLAS_CORETYPE": core, "PYTHONPATH": str(ROOT)})
    if r.returncode != 0:
        return {"error": r.stderr.strip().splitlines()[-1:] or [f"exit {r.returncode}"]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def held_out(bootstrap: int = 200) -> dict:
    """The held-out ladders with the code's constants, each file verified first, pooled per set (top level: the
    first set's); beside each, the landed band (bootstrap 95% widened to the held-out margin) on the same points."""
    out, bands, landed = {}, {}, {}
    for name, (rel, _, _) in scaling_ladders.HELDOUT.items():
        path, group = f"bench/data/{rel}", rel.rsplit("/", 1)[0]
        v = heldout.verify(path, reporter="bench/scaling_cv.py", mention=FRESH if group == FRESH else None)
        if not v["ok"]:
            out[name] = {"file": path, "set": group, "refused": v["reason"]}
            continue
        d = scaling_ladders.load(name)
        h, (f, held, truth) = d["heldout"], _fit(d, HUBER_DELTA, WEIGHT_POWER)
        (lo, hi), pred = f.interval(held), f.predict(held)
        band = {"inside": ((truth >= lo) & (truth <= hi)).tolist(), "half_width": ((hi - lo) / 2 / pred).tolist()}
        bands.setdefault(group, []).append(band)
        old = scaling.fit(scaling.Points.of(N=d["N"][~h], D=d["D"][~h], C=d["C"][~h]), d["L"][~h], "auto",
                          bootstrap=bootstrap)
        olo, ohi = old.interval(held)
        landed.setdefault(group, []).append({"inside": ((truth >= olo) & (truth <= ohi)).tolist(),
                                             "half_width": ((ohi - olo) / 2 / old.predict(held)).tolist()})
        out[name] = {"file": path, "set": group, "frozen_by": v["frozen_by"], "rungs": int((~h).sum()),
                     "heldout": int(h.sum()), **_score(f, held, truth), "coverage": float(np.mean(band["inside"])),
                     "median_half_width": statistics.median(band["half_width"]), "low": lo.tolist(),
                     "high": hi.tolist(), "landed_band": _pooled([landed[group][-1]])}
    sets = {g: _summary([r for r in out.values() if r["set"] == g and "refused" not in r], bands.get(g, []),
                        landed.get(g, [])) for g in dict.fromkeys(r["set"] for r in out.values())}
    return {"ladders": out, **sets.get("heldout/ladders", {}), "sets": sets, "target": TARGET,
            "refused": sorted(n for n, r in out.items() if "refused" in r)}


def _summary(scored: list[dict], bands: list[dict], landed: list[dict]) -> dict:
    pooled = _pooled(bands) if bands else None
    met = None if not scored else {
        "mean_rel_error_every_ladder": all(r["mean_rel_error"] <= TARGET["mean_rel_error"] for r in scored),
        "coverage": TARGET["coverage"][0] <= pooled["coverage"] <= TARGET["coverage"][1],
        "median_half_width": pooled["median_half_width"] <= TARGET["median_half_width"]}
    return {"pooled_band": pooled, "landed_pooled_band": _pooled(landed) if landed else None, "met": met}
