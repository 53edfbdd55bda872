"""The calibrated band (observatory/scaling/calibrate.py): its width follows the fixed rule — the `level` quantile
of the ladder's own rolling-origin extrapolation errors per unit of reach, grown with the distance beyond the rungs,
never under the rungs' own scatter — and it covers about its nominal level on ladders whose truth is known."""

from __future__ import annotations

import numpy as np
import pytest

from observatory.scaling import COMPUTE, Points, fit, fit_law
from observatory.scaling import calibrate as cal

TRUTH = COMPUTE.theta_of({"E": 1.6, "A": 95.18, "alpha": 0.0941})


def ladder(seed: int, noise: float = 0.01, n: int = 10):
    C = np.geomspace(1e18, 1e21, n)
    rng = np.random.default_rng(seed)
    return C, COMPUTE.predict(TRUTH, Points.of(C=C)) * np.exp(rng.normal(0, noise, n))


def test_distance_counts_e_folds_beyond_the_largest_model_or_budget_and_zero_inside():
    pts = Points.of(N=[1e8, 4e9, 1e9], D=[1e9, 1e9, 1e12])
    d = cal.distance(pts, n_max=1e9, c_max=6e18)
    assert d[0] == 0.0                                          # smaller model, smaller budget
    assert d[1] == pytest.approx(max(np.log(4.0), np.log(6 * 4e9 * 1e9 / 6e18)))
    assert d[2] == pytest.approx(np.log(6 * 1e9 * 1e12 / 6e18))  # a budget 1000x out, same model size


def test_folds_remove_the_largest_sizes_and_the_top_of_compute_once_each():
    N = np.repeat([1e7, 1e8, 1e9, 1e10], 4)
    pts = Points.of(N=N, D=N * np.tile([5.0, 20, 80, 320], 4))
    got = dict(cal.folds(pts, size_folds=3))
    assert set(got) == {"N1", "N2", "N3", "C8"}     # C4 (the top 4 in compute) is N1 here: counted once
    assert got["N1"].sum() == 4 and got["N2"].sum() == 8 and got["N3"].sum() == 12
    assert got["C8"].sum() == 2 and np.all(N[got["C8"]] == 1e10)
    assert set(dict(cal.folds(pts, size_folds=1))) == {"N1", "C8"}
    iso = Points.of(N=[1e8, 2e8, 4e8, 1e8, 2e8, 4e8, 8e8, 1e9], D=[4e9, 2e9, 1e9, 9e9, 5e9, 2e9, 1e9, 1e8])
    assert {k: int(m.sum()) for k, m in cal.folds(iso, size_folds=1)} == {"N1": 1, "C8": 1, "C4": 2}


def test_the_band_is_the_level_quantile_of_the_fold_errors_per_unit_reach_grown_with_distance():
    C, loss = ladder(0)
    f = fit_law("compute", Points.of(C=C), loss, bootstrap=0, band="calibrated")
    c = f.calibration
    # the rule by hand, from the folds' own refits (compute-only rows: the C8 and C4 folds)
    r = []
    for _, held in cal.folds(Points.of(C=C)):
        g = fit_law("compute", Points.of(C=C[~held]), loss[~held], bootstrap=0, _held=None)
        e = np.abs(np.log(g.predict(Points.of(C=C[held])) / loss[held]))
        r += list(e / (cal.D0 + np.log(C[held] / C[~held].max())))
    r = np.array(r)
    bound = cal.t_quantile(0.9, len(r)) * np.sqrt(np.mean(r ** 2))   # 3 errors: the t bound, not the quantile
    assert c.scale == pytest.approx(max(np.quantile(r, cal.LEVEL), bound), rel=1e-6)
    resid = np.abs(np.log(f.predict(Points.of(C=C)) / loss))
    assert c.floor == pytest.approx(np.quantile(resid, cal.LEVEL))
    out = Points.of(C=C[-1] * np.array([1.0, np.e, np.e ** 3]))
    lo, hi = f.interval(out)
    h = np.log(hi / f.predict(out))
    assert np.allclose(h, np.maximum(c.scale * (cal.D0 + np.array([0, 1, 3])), c.floor))
    assert np.allclose(np.log(f.predict(out) / lo), h)            # symmetric in log loss
    assert h[2] > h[1] > 0


def test_student_t_quantiles_match_their_tables():
    assert cal.t_quantile(0.9, 1) == pytest.approx(3.0777, abs=1e-4)
    assert cal.t_quantile(0.9, 2) == pytest.approx(1.8856, abs=1e-4)
    for k, t in ((3, 1.6377), (5, 1.4759), (10, 1.3722), (30, 1.3104)):
        assert cal.t_quantile(0.9, k) == pytest.approx(t, rel=1e-3)
    assert cal.t_quantile(0.9, 10_000) == pytest.approx(1.2816, abs=1e-3)


def test_few_fold_errors_give_the_t_bound_and_many_the_quantile():
    one = [("C8", 1.0, 0.02)]                                   # a 4-rung compute ladder: one fold, one error
    assert cal.scale_of(one) == pytest.approx(3.0777 * 0.02 / (cal.D0 + 1.0), rel=1e-4)
    rng = np.random.default_rng(0)
    heavy = [("C8", 0.0, e) for e in np.abs(rng.standard_t(2, 200)) * 0.01]   # many, heavy-tailed
    r = np.array([e for _, _, e in heavy]) / cal.D0
    assert cal.scale_of(heavy) == pytest.approx(max(np.quantile(r, cal.LEVEL),
                                                    cal.t_quantile(0.9, 200) * np.sqrt(np.mean(r ** 2))))
    many = [("C8", 0.0, e) for e in np.abs(rng.normal(0, 0.01, 400))]
    assert cal.scale_of(many) == pytest.approx(np.quantile([e for _, _, e in many], cal.LEVEL), rel=0.1)


def test_the_nominal_80_percent_band_covers_about_80_percent_of_forecasts_of_a_known_law():
    """40 ladders of 10 rungs (1% log-normal scatter), each forecasting a run 10x past its largest rung: the
    share of true losses (with their own scatter) inside the band lies near 0.8 — not ~1 (a band that always
    covers) and not ~0.3 (the bootstrap band's share on the Chinchilla runs)."""
    inside = []
    for seed in range(40):
        C, loss = ladder(seed)
        f = fit(Points.of(C=C), loss, "compute", bootstrap=0, band="calibrated")
        target = Points.of(C=[C[-1] * 10])
        actual = COMPUTE.predict(TRUTH, target) * np.exp(np.random.default_rng(1000 + seed).normal(0, 0.01))
        lo, hi = f.interval(target)
        inside.append(bool(lo[0] <= actual[0] <= hi[0]))
    assert 0.6 <= np.mean(inside) <= 0.97


def test_a_band_kind_that_does_not_exist_is_refused():
    C, loss = ladder(0)
    with pytest.raises(ValueError, match="band must be"):
        fit_law("compute", Points.of(C=C), loss, band="wide")
