"""Scaling-law fits on synthetic ladders: parameters recovered, bands honest, auto and the over-trained form."""

from __future__ import annotations

import numpy as np
import pytest

from observatory.scaling import CHINCHILLA, COMPUTE, OVERTRAINED, Points, fit, fit_law, holdout_error, holdout_mask
from observatory.scaling.solver import HUBER_DELTA, best_grid_starts, huber, solve

# Besiroglu et al. 2024's replication estimates of the Chinchilla law.
CHIN = {"E": 1.82, "A": 482.01, "B": 2085.43, "alpha": 0.3478, "beta": 0.3658}
# The BRIEF's isoflop fit of the Marin ladder.
MARIN = {"E": 1.6, "A": 95.18, "alpha": 0.0941}
# An over-trained truth: the data exponent is 0.30 at 1e9 active parameters and grows 0.03 per e-fold of N.
OVER = {"E": 1.7, "A": 400.0, "B": 2000.0, "alpha": 0.34, "beta": 0.30, "gamma": 0.03}
HERO = Points.of(N=[2.3e10], D=[1.875e13])   # Marin's hero: ~23B active, 18.75T tokens


def ladder(ratios=(10, 40, 160, 640), sizes=6, lo=3e7, hi=3e9) -> Points:
    """`sizes` model sizes × tokens-per-parameter ratios: a ladder whose D/N varies, as the (N, D) laws need."""
    N = np.repeat(np.geomspace(lo, hi, sizes), len(ratios))
    return Points.of(N=N, D=N * np.tile(np.asarray(ratios, float), sizes))


def sample(law, truth, points, noise, seed=0):
    clean = law.predict(law.theta_of(truth), points)
    return clean * np.exp(np.random.default_rng(seed).normal(0.0, noise, len(points)))


def rel(a, b):
    return abs(a / b - 1.0)


def test_chinchilla_recovers_the_replication_parameters():
    pts = ladder()
    exact = fit_law("chinchilla", pts, sample(CHINCHILLA, CHIN, pts, 0.0), bootstrap=0)
    for k, v in CHIN.items():
        assert rel(exact.params[k], v) < 1e-6, (k, exact.params[k])
    noisy = fit_law("chinchilla", pts, sample(CHINCHILLA, CHIN, pts, 0.001), bootstrap=0)
    assert rel(noisy.params["E"], CHIN["E"]) < 0.02
    assert abs(noisy.params["alpha"] - CHIN["alpha"]) < 0.02 and abs(noisy.params["beta"] - CHIN["beta"]) < 0.02
    truth = CHINCHILLA.predict(CHINCHILLA.theta_of(CHIN), HERO)[0]
    assert rel(noisy.predict(HERO)[0], truth) < 0.01     # 1000× the largest rung's compute, within 1%


def test_compute_form_recovers_the_marin_isoflop_fit():
    """Points sampled on 1.6 + 95.18·C^-0.0941 over the ladder's 5.5e19 → 9.2e21 FLOPs give the law back."""
    pts = Points.of(C=np.geomspace(5.5e19, 9.2e21, 8))
    f = fit_law("compute", pts, sample(COMPUTE, MARIN, pts, 0.0), bootstrap=0)
    assert f.law.name == "compute"
    assert rel(f.params["E"], 1.6) < 1e-4 and rel(f.params["A"], 95.18) < 1e-3 and rel(f.params["alpha"], 0.0941) < 1e-4
    hero = Points.of(C=[2.7e24])
    assert rel(f.predict(hero)[0], 1.6 + 95.18 * 2.7e24 ** -0.0941) < 1e-6
    # With 0.1% noise E and A trade off over two decades of compute, but the hero forecast holds.
    g = fit_law("compute", pts, sample(COMPUTE, MARIN, pts, 0.001, seed=3), bootstrap=40, seed=1)
    assert rel(g.predict(hero)[0], 1.6 + 95.18 * 2.7e24 ** -0.0941) < 0.02
    lo, hi = g.interval(hero)
    assert lo[0] <= 1.6 + 95.18 * 2.7e24 ** -0.0941 <= hi[0]


def test_compute_law_uses_six_n_d_with_active_parameters():
    """MoE: N is ACTIVE parameters; C = 6·N_active·D, so a 27.7B-A1.2B rung at 791 tokens/param is ~6.8e21."""
    pts = Points.of(N=[1.2e9], D=[791 * 1.2e9])
    assert pts.C[0] == pytest.approx(6 * 1.2e9 * 791 * 1.2e9)
    f = fit_law("compute", Points.of(C=np.geomspace(5.5e19, 9.2e21, 5)),
                1.6 + 95.18 * np.geomspace(5.5e19, 9.2e21, 5) ** -0.0941, bootstrap=0)
    assert f.predict(pts)[0] == pytest.approx(f.predict(Points.of(C=pts.C))[0])


def test_bands_contain_the_truth_and_widen_with_noise():
    pts = ladder()
    truth_hero = CHINCHILLA.predict(CHINCHILLA.theta_of(CHIN), HERO)[0]
    inside = []
    for seed in range(4):
        f = fit_law("chinchilla", pts, sample(CHINCHILLA, CHIN, pts, 0.005, seed=seed), bootstrap=40, seed=seed)
        lo, hi = f.interval(HERO)
        inside.append([f.bands[k][0] <= v <= f.bands[k][1] for k, v in CHIN.items()]
                      + [lo[0] <= truth_hero <= hi[0]])
    # 95% percentile bands: each quantity's truth inside in at least 3 of 4 independent noisy ladders
    assert np.sum(inside, axis=0).min() >= 3, inside
    widths = []
    for noise in (0.001, 0.01):
        f = fit_law("chinchilla", pts, sample(CHINCHILLA, CHIN, pts, noise, seed=7), bootstrap=40, seed=7)
        lo, hi = f.interval(HERO)
        widths.append((hi[0] - lo[0], np.subtract(*f.bands["alpha"][::-1])))
    assert widths[1][0] > 4 * widths[0][0] and widths[1][1] > 4 * widths[0][1], widths


def test_bootstrap_is_deterministic_for_a_seed():
    pts = ladder(sizes=4)
    loss = sample(CHINCHILLA, CHIN, pts, 0.003)
    a, b = (fit_law("chinchilla", pts, loss, bootstrap=15, seed=5) for _ in range(2))
    c = fit_law("chinchilla", pts, loss, bootstrap=15, seed=6)
    assert np.array_equal(a.boot, b.boot) and a.bands == b.bands
    assert a.bands != c.bands


def test_auto_picks_the_generating_law():
    pts = ladder()
    chin = fit(pts, sample(CHINCHILLA, CHIN, pts, 0.002), bootstrap=0)
    assert chin.law.name == "chinchilla", chin.candidates
    assert chin.candidates["compute"] > 5 * chin.candidates["chinchilla"]
    # A compute law seen through rungs at many D/N: L depends on N·D alone, which no separable form mimics.
    comp = fit(pts, sample(COMPUTE, MARIN, pts, 0.002), bootstrap=0)
    assert comp.law.name == "compute", comp.candidates
    assert comp.candidates["compute"] == holdout_error("compute", pts, comp.loss, by="N")     # largest models out
    assert comp.holdout_error == holdout_error("compute", pts, comp.loss)                    # largest compute out
    # Compute-only rows leave one candidate.
    only = fit(Points.of(C=pts.C), sample(COMPUTE, MARIN, pts, 0.002), bootstrap=0)
    assert only.law.name == "compute" and set(only.candidates) == {"compute"}
    assert only.holdout_error == only.candidates["compute"]


def test_over_trained_form_beats_chinchilla_on_over_trained_rungs():
    """Rungs from 10 to 2560 tokens/param, generated with an N-dependent data exponent (γ = 0.03): the
    separable Chinchilla form cannot follow it and extrapolates worse to the largest-compute rungs."""
    pts = ladder(ratios=(10, 40, 160, 640, 2560))
    ratios = []
    for seed in range(3):
        loss = sample(OVERTRAINED, OVER, pts, 0.003, seed=seed)
        e_chin, e_over = holdout_error("chinchilla", pts, loss), holdout_error("overtrained", pts, loss)
        ratios.append(e_chin / e_over)
    assert min(ratios) > 3, ratios
    f = fit(pts, sample(OVERTRAINED, OVER, pts, 0.003), bootstrap=30)
    assert f.law.name == "overtrained", f.candidates
    assert abs(f.params["gamma"] - 0.03) < 0.003 and abs(f.params["beta"] - 0.30) < 0.01
    assert f.bands["gamma"][0] > 0.02                   # the interaction is detected: its band is far from 0
    truth = OVERTRAINED.predict(OVERTRAINED.theta_of(OVER), HERO)[0]
    assert rel(f.predict(HERO)[0], truth) < 0.02


def test_over_trained_form_with_gamma_zero_is_chinchilla():
    pts = ladder()
    theta = OVERTRAINED.theta_of({**CHIN, "gamma": 0.0})
    assert np.allclose(OVERTRAINED.predict(theta, pts), CHINCHILLA.predict(CHINCHILLA.theta_of(CHIN), pts))


def test_holdout_is_the_largest_compute_rungs():
    pts = Points.of(C=[1e20, 5e20, 3e20, 9e20, 9e20, 2e20, 7e20, 4e20])
    assert holdout_mask(pts).tolist() == [False, False, False, True, True, False, False, False]  # k=2, ties in
    assert holdout_mask(pts, 3).tolist() == [False, False, False, True, True, False, True, False]
    sized = Points.of(N=[1e8, 1e8, 4e8, 4e8, 1e9, 1e9, 2e8, 2e8], D=[1e12, 2e12, 1e10, 2e10, 1e10, 4e9, 1e9, 2e9])
    assert holdout_mask(sized).tolist() == [True, True, False, False, False, False, False, False]
    assert holdout_mask(sized, by="N").tolist() == [False, False, False, False, True, True, False, False]
    C = np.geomspace(5.5e19, 9.2e21, 4)
    four = fit_law("compute", Points.of(C=C), 1.6 + 95.18 * C**-0.0941, bootstrap=0)
    assert four.holdout_rows == 1 and four.holdout_error < 1e-6   # 3 rows left for 3 parameters: fitted
    three = fit_law("compute", Points.of(C=C[:3]), 1.6 + 95.18 * C[:3] ** -0.0941, bootstrap=0)
    assert three.holdout_error is None                           # 2 rows left: no held-out error, still a fit
    assert rel(three.params["alpha"], 0.0941) < 1e-4


def test_too_few_rows_and_bad_values_are_refused():
    pts = ladder(sizes=1)                      # 4 rows
    with pytest.raises(ValueError, match="4 rows are fewer than the 5 parameters of law chinchilla"):
        fit_law("chinchilla", pts, [3.0, 2.9, 2.8, 2.7])
    with pytest.raises(ValueError, match="loss must be finite and > 0"):
        fit_law("compute", pts, [3.0, 2.9, -2.8, 2.7])
    with pytest.raises(ValueError, match="needs column"):
        fit_law("chinchilla", Points.of(C=pts.C), [3.0, 2.9, 2.8, 2.7])
    with pytest.raises(ValueError, match="finite and > 0"):
        Points.of(N=[1e9, 0.0], D=[1e10, 1e10])
    with pytest.raises(ValueError, match="unknown law"):
        fit(pts, [3.0, 2.9, 2.8, 2.7], "kaplan")


def test_solver_reaches_scipy_lbfgs_optimum_and_pruned_grid_matches_full():
    """The batched Levenberg–Marquardt minimiser ends where SciPy's L-BFGS-B (the replication's optimiser) does
    from the same starts, and refining the 64 best grid points finds the full grid's optimum."""
    optimize = pytest.importorskip("scipy.optimize")
    pts = ladder(sizes=5)
    y = np.log(sample(CHINCHILLA, CHIN, pts, 0.004, seed=11))
    X = CHINCHILLA.design(pts)
    starts = best_grid_starts(CHINCHILLA, X, y, 2)
    _, f_lm = solve(CHINCHILLA, X, y, starts)

    def objective(theta):  # written out independently; scaled by 1/δ² so L-BFGS-B does not stop at f ~ 1e-6
        t = np.einsum("nkp,p->nk", X, theta)
        m = t.max(1)
        m = m + np.log(np.exp(t - m[:, None]).sum(1))
        w = np.exp(t - m[:, None])
        r = m - y
        grad = np.einsum("n,nk,nkp->p", np.clip(r, -HUBER_DELTA, HUBER_DELTA), w, X)
        return huber(r) / HUBER_DELTA**2, grad / HUBER_DELTA**2

    best_scipy = min(optimize.minimize(objective, s, jac=True, method="L-BFGS-B", bounds=CHINCHILLA.bounds,
                                       options={"maxiter": 3000, "ftol": 1e-15, "gtol": 1e-10}).fun for s in starts)
    assert f_lm.min() <= best_scipy * HUBER_DELTA**2 * (1 + 1e-7)

    cpts = Points.of(C=np.geomspace(5.5e19, 9.2e21, 10))
    cy = np.log(sample(COMPUTE, MARIN, cpts, 0.003, seed=2))
    cX = COMPUTE.design(cpts)
    _, full = solve(COMPUTE, cX, cy, best_grid_starts(COMPUTE, cX, cy, None))
    _, pruned = solve(COMPUTE, cX, cy, best_grid_starts(COMPUTE, cX, cy, 64))
    assert pruned.min() <= full.min() * (1 + 1e-9)


def bent_ladder():
    """A compute ladder whose trend steepens at 1e19 FLOPs (α 0.0941 below, 0.12 above, continuous there): the
    small rungs are off the regime that the large ones, and the forecast, live in."""
    C = np.geomspace(1e17, 1e22, 16)

    def law(c, a):
        return 1.6 + 95.18 * 1e19 ** (a - 0.0941) * np.asarray(c) ** -a

    return Points.of(C=C), np.where(C < 1e19, law(C, 0.0941), law(C, 0.12)), law(2.7e24, 0.12)


def test_rungs_weigh_by_their_compute():
    """Each rung's Huber term weighs (C/C_max)^0.5, so the trend near the top of the ladder, where the forecast
    extrapolates from, is followed; power=0 is the unweighted objective of Besiroglu et al."""
    pts, loss, truth = bent_ladder()
    hero = Points.of(C=[2.7e24])
    weighted = fit_law("compute", pts, loss, bootstrap=0)
    plain = fit_law("compute", pts, loss, bootstrap=0, power=0)
    e_w, e_p = (rel(f.predict(hero)[0], truth) for f in (weighted, plain))
    assert e_w < 0.03 and e_w < e_p / 2, (e_w, e_p)
    r = np.log(weighted.predict(pts)) - np.log(loss)
    assert weighted.objective == pytest.approx(huber(r, HUBER_DELTA, np.sqrt(pts.C / pts.C.max())), rel=1e-12)
    assert plain.objective == pytest.approx(huber(np.log(plain.predict(pts)) - np.log(loss)), rel=1e-12)


def test_the_band_holds_the_laws_own_extrapolation_error():
    """The bootstrap band sees only the rungs' scatter; a misspecified law misses by more. The band is widened
    to at least L̂·(1 ± m), m the worst held-out error grown with the distance beyond the rungs in ln C."""
    pts, loss, truth = bent_ladder()
    hero = Points.of(C=[2.7e24])
    f = fit_law("compute", pts, loss, bootstrap=40, seed=1)
    lo, hi = f.interval(hero)
    assert lo[0] <= truth <= hi[0], (lo, truth, hi)
    assert np.quantile(f.law.predict(f.boot, hero), 0.975) < truth      # the bootstrap alone misses it
    assert f.holdout_max >= f.holdout_error > 0 and f.holdout_reach > 0
    m = f.holdout_max * max(1.0, np.log(2.7e24 / 1e22) / f.holdout_reach)
    pred = f.predict(hero)[0]
    assert lo[0] <= pred * (1 - m) * (1 + 1e-12) and hi[0] >= pred * (1 + m) * (1 - 1e-12)
    inside = Points.of(C=[1e20])                           # within the rungs: at least the held-out error itself
    lo_in, hi_in = f.interval(inside)
    assert hi_in[0] / f.predict(inside)[0] - 1 >= f.holdout_max * (1 - 1e-12)


def test_a_declared_min_margin_floors_the_band_where_the_held_out_error_is_tiny():
    """Rungs exactly on a power law: held-out error ~0, so the band is the bootstrap's sliver; a declared
    min_margin widens it to at least L̂·(1 ± m), and never narrows a band that is wider already."""
    C = np.geomspace(1e10, 5e11, 4)
    loss = 0.01 + 20.0 * C ** -0.1
    hero = Points.of(C=[1.5e12])
    thin = fit_law("compute", Points.of(C=C), loss, bootstrap=20, seed=0)
    floored = fit_law("compute", Points.of(C=C), loss, bootstrap=20, seed=0, min_margin=0.02)
    pred = floored.predict(hero)[0]
    lo, hi = thin.interval(hero)
    assert hi[0] / pred - 1 < 0.005                      # the sliver a perfect ladder gives
    lo2, hi2 = floored.interval(hero)
    assert lo2[0] <= pred * 0.98 * (1 + 1e-12) and hi2[0] >= pred * 1.02 * (1 - 1e-12)
    assert floored.predictions(hero)[0]["low"] == pytest.approx(lo2[0])
    wide = fit_law("compute", Points.of(C=C), loss, bootstrap=20, seed=0, min_margin=0.3)
    assert wide.interval(hero)[0][0] == pytest.approx(pred * 0.7)
    with pytest.raises(ValueError, match="min_margin"):
        fit_law("compute", Points.of(C=C), loss, bootstrap=0, min_margin=1.5)
