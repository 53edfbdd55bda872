"""Where the calibrated band's pooled prior (observatory/scaling/calibrate.py POOLED) comes from: rule 3 on the four
development ladders reproduces it on the OpenBLAS kernel it was computed with (bench/scaling_cv.py
PROVENANCE_CORE), and why another kernel gives another prior — the Gadre ladders' N2 fold keeps two model sizes,
too few to pin the N term, so its refit ties exactly between optima that forecast differently (docs/SCALING.md,
"The pooled prior's provenance")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bench import scaling_cv, scaling_ladders
from observatory import scaling
from observatory.scaling import calibrate as cal
from observatory.scaling.fit import DEFAULT_STARTS, WEIGHT_POWER, compute_weights
from observatory.scaling.solver import HUBER_DELTA, best_grid_starts, solve

ROOT = Path(__file__).resolve().parents[2]


def core_in_child(core: str) -> str:
    code = "from bench import scaling_cv; print(scaling_cv.blas_core())"
    env = {**os.environ, "OPENBLAS_CORETYPE": core}
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          check=True).stdout.strip()


def test_blas_core_names_the_kernel_numpys_openblas_runs_and_openblas_coretype_picks_it():
    here = scaling_cv.blas_core()
    assert here not in ("", "unknown")
    assert core_in_child("NoSuchCore") == here               # an unknown name: OpenBLAS keeps its own choice
    assert core_in_child("Sandybridge") == "Sandybridge"     # AVX: every x86-64 box this runs on has it


def test_pooled_is_rule_3_on_the_development_ladders_on_the_kernel_it_was_computed_with():
    got = scaling_cv.prior_on_core(scaling_cv.PROVENANCE_CORE, (HUBER_DELTA, WEIGHT_POWER))
    if got.get("blas_core") != scaling_cv.PROVENANCE_CORE:
        pytest.skip(f"this machine cannot run OpenBLAS's {scaling_cv.PROVENANCE_CORE} kernel: {got}")
    p = got["prior"]
    assert [float(f"{p['scale']:.3g}"), float(f"{p['m2']:.3g}"), p["weight"]] == [
        cal.POOLED.scale, cal.POOLED.m2, cal.POOLED.weight]


@pytest.mark.parametrize("name", ["gadre2024_c4", "gadre2024_rpj", "gadre2024_rw"])
def test_a_gadre_n2_fold_ties_between_optima_that_forecast_its_removed_rungs_differently(name):
    d = scaling_ladders.load(name)
    h = d["heldout"]
    pts = scaling.Points.of(N=d["N"][~h], D=d["D"][~h], C=d["C"][~h])
    law = scaling.get_law("overtrained")                   # `auto`'s choice on all three (bench/scaling_cv.py)
    held = dict(cal.folds(pts, cal.SIZE_FOLDS))["N2"]
    kept, y = pts.take(~held), np.log(d["L"][~h][~held])
    assert len(np.unique(kept.N)) == 2                     # E, A and α of the N term meet two sizes
    X, w = law.design(kept), compute_weights(kept.C, WEIGHT_POWER)
    theta, f = solve(law, X, y, best_grid_starts(law, X, y, DEFAULT_STARTS, HUBER_DELTA, w), HUBER_DELTA, w)
    tied = np.flatnonzero(f <= f.min() * (1 + 1e-9))
    err = [np.mean(np.abs(law.log_predict(t, pts.take(held)) - np.log(d["L"][~h][held]))) for t in theta[tied]]
    assert len(tied) >= 3 and max(err) > 3 * min(err)      # one objective, forecasts 3x and more apart
