"""Minimise the Huber loss of log-loss residuals for an LSE law from many starts at once (numpy only).

The objective is Besiroglu et al. 2024's (arXiv:2404.10102, after Hoffmann et al. 2022 Approach 3):
Σ w·Huber_δ(log L̂ − log L), from many starts over a grid, best kept; they take w = 1 and δ = 1e-3, our fits
default to compute weights and δ = 1e-2 (fit.py; docs/SCALING.md, measured on public ladders). They minimise it
with L-BFGS; we use Levenberg–Marquardt on the iteratively reweighted (IRLS) Gauss–Newton model of the same objective,
vectorised over all starts (and over bootstrap resamples). Gauss–Newton steps are unaffected by the near
collinearity of coefficients and exponents (ln N and ln D are ~20) that makes L-BFGS crawl for hundreds of
iterations, and in numpy a loop over starts is what costs time, not the arithmetic. Besiroglu et al. traced the
original fit's errors to L-BFGS stopping before convergence "due to a poor choice of loss scale"; our stopping
tests are relative to the objective and the step, not to 1. A step is kept only if the true Huber objective
falls, so this is a descent method on the (weighted) objective; tests/observatory/test_scaling_fit.py checks
that it ends where SciPy's L-BFGS-B does.
"""

from __future__ import annotations

import numpy as np

from observatory.scaling.laws import Law, lse

__all__ = ["HUBER_DELTA", "huber", "solve", "best_grid_starts"]

HUBER_DELTA = 1e-2   # at the ~1% scatter of real ladders' final losses (Besiroglu et al.: 1e-3)
MAX_ITERS = 400


def huber(r: np.ndarray, delta: float = HUBER_DELTA, weights: np.ndarray | None = None) -> np.ndarray:
    """Σ over the last axis of w·Huber_δ(r): quadratic within δ, linear beyond (one bad rung cannot dominate)."""
    a = np.abs(r)
    h = np.where(a <= delta, 0.5 * r * r, delta * (a - 0.5 * delta))
    return (h if weights is None else h * weights).sum(-1)


def _evaluate(X, y, theta, delta, weights):
    """Objective, residuals and Jacobian d(log L̂)/dθ for each start; X is (n,k,p) shared or (S,n,k,p) own."""
    t = np.einsum("...nkp,...p->...nk", X, theta)
    m = lse(t)
    w = np.exp(t - m[..., None])                      # softmax over terms = d LSE / d term
    r = m - y
    return huber(r, delta, weights), r, np.einsum("...nk,...nkp->...np", w, X)


def solve(law: Law, X: np.ndarray, y: np.ndarray, starts: np.ndarray, delta: float = HUBER_DELTA,
          weights: np.ndarray | None = None):
    """Minimise from every start: X (n,k,p) with y (n,), or per-start data X (S,n,k,p) with y (S,n).
    `weights` (shaped as y; None: all 1) weigh each row's Huber term.
    Returns (θ (S,p), objective (S,)) — each start's own minimum; the caller keeps the best."""
    own = X.ndim == 4
    theta = np.array(starts, dtype=float)
    S, p = theta.shape
    Y = y if own else np.broadcast_to(y, (S, y.shape[-1]))
    W = np.ones_like(Y) if weights is None else np.broadcast_to(np.asarray(weights, float), Y.shape)
    lo, hi = np.array(law.bounds, dtype=float).T
    theta = np.clip(theta, lo, hi)
    f, r, J = _evaluate(X, Y, theta, delta, W)
    lam = np.full(S, 1e-3)
    active = np.isfinite(f)
    eye = np.eye(p)
    for _ in range(MAX_ITERS):
        i = np.flatnonzero(active)
        if not len(i):
            break
        # IRLS: Huber's weight min(1, δ/|r|) turns the objective into a weighted least-squares majoriser.
        om = np.minimum(1.0, delta / np.maximum(np.abs(r[i]), 1e-300)) * W[i]
        H = np.einsum("snp,sn,snq->spq", J[i], om, J[i])
        g = np.einsum("snp,sn->sp", J[i], om * r[i])
        d = np.diagonal(H, axis1=1, axis2=2)
        # Marquardt scaling; the floor keeps the system solvable when a term has vanished (its columns are 0)
        damp = lam[i, None] * (d + 1e-12 * d.max(-1, keepdims=True) + 1e-300)
        step = -np.linalg.solve(H + eye * damp[:, None, :], g[..., None])[..., 0]
        new = np.clip(theta[i] + step, lo, hi)
        fn, rn, Jn = _evaluate(X[i] if own else X, Y[i], new, delta, W[i])
        ok = fn < f[i]
        gain, moved = f[i] - np.where(ok, fn, f[i]), np.abs(new - theta[i]).max(-1)
        a = i[ok]
        theta[a], f[a], r[a], J[a] = new[ok], fn[ok], rn[ok], Jn[ok]
        lam[a] = np.maximum(lam[a] / 3.0, 1e-12)
        lam[i[~ok]] *= 4.0
        small = (gain <= 1e-13 * f[i]) | (moved <= 1e-11 * (1.0 + np.abs(theta[i]).max(-1)))
        active[i[(ok & small) | (~ok & (lam[i] > 1e10))]] = False
    return theta, np.where(np.isfinite(f), f, np.inf)      # a start that overflowed ranks last


def _grid_scores(X, y, grid, delta, weights):
    out = np.empty(len(grid))
    for lo in range(0, len(grid), 512):               # chunked: grid × rows × terms floats at once
        t = np.einsum("nkp,gp->gnk", X, grid[lo:lo + 512])
        out[lo:lo + 512] = huber(lse(t) - y, delta, weights)
    return out


def best_grid_starts(law: Law, X: np.ndarray, y: np.ndarray, starts: int | None,
                     delta: float = HUBER_DELTA, weights: np.ndarray | None = None) -> np.ndarray:
    """The `starts` grid points with the lowest objective (all of them for None). Scoring the whole grid is
    one vectorised pass; refining only its best points finds the optimum that refining every point finds
    (tests: the compute law; `bench/scaling.py --full-grid`: Chinchilla's 4500 starts, same optimum to 1e-14)
    at a fraction of the cost: most grid starts sit far off, where their terms vanish or explode, and take
    hundreds of iterations to crawl back."""
    grid = law.grid_points()
    if starts is None or starts >= len(grid):
        return grid
    return grid[np.argsort(_grid_scores(X, y, grid, delta, weights), kind="stable")[:starts]]
