"""The calibrated band (observatory/scaling/calibrate.py): its width follows the fixed rule — a prior pooled from
the development ladders' rolling-origin extrapolation errors per unit of reach (each ladder weighing 1), shrunk
towards the ladder's own errors by their count, grown with the distance beyond the rungs, never under the rungs'
own scatter — and it covers about its nominal level on ladders whose truth is known."""

from __future__ import annotations

from dataclasses import replace

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


def test_a_size_fold_that_leaves_fewer_sizes_than_the_n_term_has_parameters_is_refused():
    N = np.repeat([1e7, 1e8, 1e9, 1e10], 4)
    pts = Points.of(N=N, D=N * np.tile([5.0, 20, 80, 320], 4))
    assert cal.MIN_KEPT_SIZES == 3                  # E, A and α of the N term need three sizes to be pinned
    assert set(dict(cal.folds(pts, 3, cal.MIN_KEPT_SIZES))) == {"N1", "C8"}  # N2 would keep 2 sizes, N3 one
    assert set(dict(cal.folds(pts, 3, 4))) == {"C8", "C4"}                   # no size fold at all
    rng = np.random.default_rng(0)
    loss = (1.7 + 400 / N ** 0.34 + 2000 / pts.D ** 0.3) * np.exp(rng.normal(0, 0.005, len(N)))
    f = fit_law("chinchilla", pts, loss, bootstrap=0, band="calibrated")
    assert {e[0] for e in f.calibration.errors} == {"N1", "C8"}  # the N2 refit (two sizes) never ran
    C = N * pts.D * 6                                             # the compute law has no N term: no such limit
    assert {"N1", "N2"} <= set(dict(cal.folds(Points.of(N=N, D=pts.D, C=C), 3, 1)))


def shrunk(r, prior=cal.POOLED) -> float:
    """Rule 4 by hand: s = S·sqrt((ν0 + Σ (r / S)² / M2) / (ν0 + k))."""
    u = np.asarray(r, dtype=float) / prior.scale
    return prior.scale * np.sqrt((prior.weight + np.sum(u * u) / prior.m2) / (prior.weight + u.size))


def test_the_band_is_the_pooled_prior_shrunk_by_the_ladders_own_errors_and_grown_with_distance():
    C, loss = ladder(0)
    f = fit_law("compute", Points.of(C=C), loss, bootstrap=0, band="calibrated")
    c = f.calibration
    # the rule by hand, from the folds' own refits (compute-only rows: the C8 and C4 folds)
    r = []
    for _, held in cal.folds(Points.of(C=C)):
        g = fit_law("compute", Points.of(C=C[~held]), loss[~held], bootstrap=0, _held=None)
        e = np.abs(np.log(g.predict(Points.of(C=C[held])) / loss[held]))
        r += list(e / (cal.D0 + np.log(C[held] / C[~held].max())))
    assert len(r) == 3 and c.prior == cal.POOLED
    assert c.scale == pytest.approx(shrunk(r), rel=1e-6)
    resid = np.abs(np.log(f.predict(Points.of(C=C)) / loss))
    assert c.floor == pytest.approx(np.quantile(resid, cal.LEVEL))
    out = Points.of(C=C[-1] * np.array([1.0, np.e, np.e ** 3]))
    lo, hi = f.interval(out)
    h = np.log(hi / f.predict(out))
    assert np.allclose(h, np.maximum(c.scale * (cal.D0 + np.array([0, 1, 3])), c.floor))
    assert np.allclose(np.log(f.predict(out) / lo), h)            # symmetric in log loss
    assert h[2] > h[1] > 0


def test_the_reach_candidates_floor_or_replace_the_scale_and_are_off_by_default():
    """Rule 6 (issue 48's fifth-set candidates): REACH per e-fold (plus D0) as the scale's floor, or as the scale."""
    C, loss = ladder(0)
    c = fit_law("compute", Points.of(C=C), loss, bootstrap=0, band="calibrated").calibration
    assert c.reach == 0.0 and not c.reach_only and 0 < cal.REACH < 0.05
    out = Points.of(C=C[-1] * np.array([1.0, np.e, np.e ** 3]))
    reach = cal.D0 + np.array([0, 1, 3])   # D0 + distance
    big, small = replace(c, reach=c.scale * 2), replace(c, reach=c.scale / 2)
    assert np.allclose(big.half_width(out), np.maximum(2 * c.scale * reach, c.floor))
    assert np.allclose(small.half_width(out), c.half_width(out))               # a floor below the scale: no change
    only = replace(c, reach=c.scale / 2, reach_only=True)
    assert np.allclose(only.half_width(out), np.maximum(c.scale / 2 * reach, c.floor))


def test_the_pooled_prior_weighs_each_ladder_once_and_its_weight_follows_their_spread():
    a = [("C8", 0.0, e) for e in (0.01, 0.02, 0.03, 0.04)]      # d = 0, D0 = 1: r = |e|
    b = [("C8", 0.0, 0.10)]                                     # one error, weighing as much as a's four
    p = cal.pooled_prior([a, b])
    assert p.scale == pytest.approx(0.10)                       # a's four are half the weight: 0.8 reaches b's
    assert cal.pooled_prior([a, b], level=0.5).scale == pytest.approx(0.04)
    w = np.array([1 / 8] * 4 + [1 / 2])
    r = np.array([0.01, 0.02, 0.03, 0.04, 0.10])
    assert p.m2 == pytest.approx(np.sum(w * (r / 0.10) ** 2))
    spread = np.var([0.5 * np.log(np.mean(r[:4] ** 2)), np.log(0.10)], ddof=1)
    assert p.weight == max(1, round(0.5 / spread)) == 1          # ladders 4x apart: the prior counts as one error
    close = cal.pooled_prior([a, [("C8", 0.0, e * 1.05) for _, _, e in a]])
    assert close.weight > 20                                    # ladders alike: the prior outweighs a few errors
    assert cal.pooled_prior([a, [("N3", 0.0, 9.0)] + b]).scale == pytest.approx(0.10)   # N3 is past SIZE_FOLDS
    with pytest.raises(ValueError, match="two ladders"):
        cal.pooled_prior([a])


def test_no_error_gives_the_prior_one_error_half_of_it_and_many_their_own_scale():
    prior = cal.POOLED
    assert cal.scale_of([]) == pytest.approx(prior.scale)
    typical = prior.scale * np.sqrt(prior.m2)                   # an error as large as the prior's own RMS
    assert cal.scale_of([("C8", 0.0, typical)]) == pytest.approx(prior.scale)
    one = [("C8", 1.0, 0.02)]                                   # a 4-rung compute ladder: one fold, one error
    assert cal.scale_of(one) == pytest.approx(shrunk([0.02 / (cal.D0 + 1.0)]))
    assert prior.weight == 2 and cal.scale_of(one) ** 2 == pytest.approx(
        (2 * prior.scale ** 2 + (0.01 ** 2) / prior.m2) / 3)   # the prior counts as two errors, the one as one
    rng = np.random.default_rng(0)
    many = [("C8", 0.0, e) for e in np.abs(rng.normal(0, 0.003, 400))]
    own = np.sqrt(np.mean([e * e for _, _, e in many]) / prior.m2)
    assert cal.scale_of(many) == pytest.approx(own, rel=0.05) and cal.scale_of(many) < prior.scale / 2
    with pytest.raises(ValueError, match="level"):
        cal.scale_of(one, level=0.9)


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
