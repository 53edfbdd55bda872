"""Where the calibrated band's pooled prior (observatory/scaling/calibrate.py POOLED) comes from: rule 3 on the four
development ladders reproduces it on each OpenBLAS kernel it was recomputed on (bench/scaling_cv.py POOLED_ON), and
why a size fold must keep MIN_KEPT_SIZES model sizes — the Gadre ladders' N2 fold keeps two, too few to pin the N
term, so its refit ties exactly between optima that forecast differently, and before the rule refused that fold the
prior depended on the kernel (docs/SCALING.md, "The pooled prior's provenance")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bench import harness, scaling_cv
from bench.data.ladders import ladders as scaling_ladders
from observatory import scaling
from observatory.scaling import calibrate as cal
from observatory.scaling.fit import DEFAULT_STARTS, WEIGHT_POWER, compute_weights
from observatory.scaling.solver import HUBER_DELTA, best_grid_starts, solve

ROOT = Path(__file__).resolve().parents[2]
PRIOR = """
import json
from dataclasses import asdict
from bench import harness, scaling_cv as s
fo = (s.HUBER_DELTA, s.WEIGHT_POWER)    # the code's fit option
runs = {n: {fo: {"fit": s._fit(s.load(n), *fo)}} for n in s.LADDERS}
print(json.dumps([harness.blas_core(), asdict(s._prior(runs, fo, list(runs)))]))
"""  # rule 3 on all four development ladders, and the kernel it ran on


def in_child(code: str, core: str | None) -> str:
    """Run `code` in a child Python whose OpenBLAS is asked for the `core` kernel (None: not asked, whatever the
    environment asks); its last line of output."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    if core:
        env["OPENBLAS_CORETYPE"] = core
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          check=True).stdout.strip().splitlines()[-1]


def test_blas_core_names_the_kernel_numpys_openblas_runs_and_openblas_coretype_picks_it():
    here = harness.blas_core()
    assert here not in ("", "unknown")                       # numpy is loaded (this module imports it)
    core = "import numpy; from bench import harness; print(harness.blas_core())"
    assert in_child(core, os.environ.get("OPENBLAS_CORETYPE")) == here  # a child asked as this process was
    own = in_child(core, None)                                 # (a box may set OPENBLAS_CORETYPE for everything)
    assert in_child(core, "NoSuchCore") == own                # an unknown name: OpenBLAS keeps its own choice
    assert in_child(core, "Sandybridge") == "Sandybridge"     # AVX: every x86-64 box this runs on has it
    assert in_child("from bench import harness; print(repr(harness.blas_core()))", "Haswell") == "''"  # no numpy


# The instruction set each kernel needs: OpenBLAS asked for a kernel the CPU lacks runs it anyway and dies of SIGILL
# (SkylakeX's AVX-512 on an AMD EPYC without it), so a child is asked only for kernels this CPU can run.
NEEDS = {"Haswell": "avx2", "SkylakeX": "avx512f"}


def cpu_flags() -> set[str]:
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    return {f for line in text.splitlines() if line.startswith("flags") for f in line.split(":", 1)[1].split()}


@pytest.mark.parametrize("kernel", scaling_cv.POOLED_ON)
def test_pooled_is_rule_3_on_the_development_ladders_on_each_kernel_it_was_recomputed_on(kernel):
    if NEEDS[kernel] not in cpu_flags():
        pytest.skip(f"this machine cannot run OpenBLAS's {kernel} kernel (no {NEEDS[kernel]})")
    core, p = json.loads(in_child(PRIOR, kernel))
    if core != kernel:
        pytest.skip(f"this machine cannot run OpenBLAS's {kernel} kernel (it ran {core})")
    assert [float(f"{p['scale']:.3g}"), float(f"{p['m2']:.3g}"), p["weight"]] == [
        cal.POOLED.scale, cal.POOLED.m2, cal.POOLED.weight]


@pytest.mark.parametrize("name", ["gadre2024_c4", "gadre2024_rpj", "gadre2024_rw"])
def test_a_gadre_n2_fold_ties_between_optima_that_forecast_its_removed_rungs_differently(name):
    d = scaling_ladders.load(name)
    h = d["heldout"]
    pts = scaling.Points.of(N=d["N"][~h], D=d["D"][~h], C=d["C"][~h])
    law = scaling.get_law("overtrained")                   # `auto`'s choice on all three (bench/scaling_cv.py)
    assert "N2" not in dict(cal.folds(pts, cal.SIZE_FOLDS, cal.MIN_KEPT_SIZES))  # the band's rule refuses it
    held = dict(cal.folds(pts, cal.SIZE_FOLDS))["N2"]
    kept, y = pts.take(~held), np.log(d["L"][~h][~held])
    assert len(np.unique(kept.N)) == 2                     # E, A and α of the N term meet two sizes
    X, w = law.design(kept), compute_weights(kept.C, WEIGHT_POWER)
    theta, f = solve(law, X, y, best_grid_starts(law, X, y, DEFAULT_STARTS, HUBER_DELTA, w), HUBER_DELTA, w)
    tied = np.flatnonzero(f <= f.min() * (1 + 1e-9))
    err = [np.mean(np.abs(law.log_predict(t, pts.take(held)) - np.log(d["L"][~h][held]))) for t in theta[tied]]
    assert len(tied) >= 3 and max(err) > 3 * min(err)      # one objective, forecasts 3x and more apart
