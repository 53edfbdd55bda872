"""Fit a law to ladder rungs: best of many starts, rung-bootstrap bands, held-out error, and `auto`.

Rungs weigh (C / C_max)^power in the objective (default 0.5; 0 is unweighted): a forecast extrapolates from the
top of the ladder. Bands: resample the rungs with replacement, refit every resample (from the full fit's optimum
and the full data's best grid points), take percentiles — of each parameter and of each prediction — then widen
a prediction's band to at least L̂·(1 ± margin), the law's own held-out error (`Fit.margin`). Deterministic for a
seed.

Held-out error: hold out the largest-compute rungs (the k largest, default max(1, n // 4), ties in compute
included), fit the rest, and report the mean relative error |L̂/L − 1| on the held-out ones. A forecast is an
extrapolation in compute, so this is the error that matters; leave-one-out would mostly measure interpolation.
`auto` scores the candidate laws this way and keeps the simplest one within 10% of the lowest held-out error.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from observatory.scaling.calibrate import Calibration, calibrate
from observatory.scaling.laws import LAWS, Law, Points, get_law
from observatory.scaling.solver import HUBER_DELTA, best_grid_starts, huber, solve

__all__ = ["Fit", "fit", "fit_law", "holdout_error", "holdout_mask", "DEFAULT_STARTS"]

DEFAULT_STARTS = 64   # grid points refined per fit (the best-scoring ones); None refines the whole grid
WEIGHT_POWER = 0.5    # a rung's Huber term weighs (C / C_max)^p: the rungs nearest the forecast count most
_BOOT_STARTS = 3      # full-data grid starts per bootstrap refit, besides the full fit's optimum
AUTO_MARGIN = 0.10    # auto: a law with more parameters must cut the held-out error by more than 10%


@dataclass(frozen=True, eq=False)  # holds arrays: compare fits by their fields, not with ==
class Fit:
    """A fitted law: the optimum θ, the bootstrap θs behind its bands, and how well it extrapolated."""

    law: Law
    theta: np.ndarray
    points: Points
    loss: np.ndarray
    boot: np.ndarray                     # (K, p) bootstrap θ; K = 0 means no bands
    level: float = 0.95
    seed: int = 0
    objective: float = 0.0               # Σ Huber(log L̂ − log L) at the optimum
    holdout_error: float | None = None   # mean |L̂/L − 1| on the held-out largest-compute rungs (None: too few)
    holdout_rows: int = 0
    candidates: dict = field(default_factory=dict)  # auto only: law name → its held-out error
    holdout_max: float | None = None     # the largest |L̂/L − 1| among those held-out rungs
    holdout_reach: float = 0.0           # ln(C_max / C_max of the rungs fitted) of that held-out fit
    min_margin: float = 0.0              # a declared floor on the band's relative half-width (see margin())
    calibration: Calibration | None = None  # band="calibrated": the band's width rule (calibrate.py)

    @property
    def params(self) -> dict[str, float]:
        return dict(zip(self.law.param_names, map(float, self.law.natural(self.theta))))

    @property
    def bands(self) -> dict[str, tuple[float, float]] | None:
        if not len(self.boot):
            return None
        lo, hi = self._quantiles(self.law.natural(self.boot))
        return {k: (float(a), float(b)) for k, a, b in zip(self.law.param_names, lo, hi)}

    def _quantiles(self, samples: np.ndarray):
        q = (1.0 - self.level) / 2.0
        return np.quantile(samples, [q, 1.0 - q], axis=0)

    def predict(self, points: Points) -> np.ndarray:
        return self.law.predict(self.theta, points)

    def margin(self, points: Points) -> np.ndarray:
        """The relative error the law is expected to make at `points`: its worst held-out error, grown in
        proportion to how much further (in ln C) the points lie beyond the rungs than the held-out rungs lay
        beyond the ones fitted without them; never below `min_margin`, a floor the caller declares (a ladder of
        a few rungs on a near-perfect power law measures ~0 held-out error, yet runs still differ by their seed and
        schedule: docs/SCALING.md "Bands"). `min_margin` where there was no held-out fit."""
        floor = np.full(len(points), self.min_margin)
        if self.holdout_max is None or self.holdout_reach <= 0:
            return floor
        beyond = np.log(points.C / self.points.C.max())
        return np.maximum(floor, self.holdout_max * np.maximum(1.0, beyond / self.holdout_reach))

    def interval(self, points: Points) -> tuple[np.ndarray, np.ndarray] | None:
        """The band at `points` (None without bootstrap): the bootstrap fits' percentile band, widened to at
        least L̂·(1 ± margin). The bootstrap sees only the rungs' noise; a forecast also misses by the law's
        own extrapolation error, which the held-out fit measured (docs/SCALING.md, "Bands").
        A fit made with band="calibrated": L̂·exp(±h), h from extrapolation errors pooled over the development
        ladders, shrunk towards the ladder's own (calibrate.py; nominal coverage `calibration.level`)."""
        if self.calibration is not None:
            pred, h = self.predict(points), self.calibration.half_width(points)
            return pred * np.exp(-h), pred * np.exp(h)
        if not len(self.boot):
            return None
        lo, hi = self._quantiles(self.law.predict(self.boot, points))
        pred, m = self.predict(points), self.margin(points)
        return np.minimum(lo, pred * (1 - m)), np.maximum(hi, pred * (1 + m))

    def predictions(self, points: Points) -> list[dict]:
        """[{N, D, C, loss, low, high}]: N and D None for compute-only points, low/high None without bands."""
        loss, band = self.predict(points), self.interval(points)
        opt = (lambda a, i: None if a is None else float(a[i]))
        return [{"N": opt(points.N, i), "D": opt(points.D, i), "C": float(points.C[i]), "loss": float(loss[i]),
                 "low": None if band is None else float(band[0][i]),
                 "high": None if band is None else float(band[1][i])} for i in range(len(points))]

    def summary(self, points: Points | None = None) -> dict:
        """JSON-ready: law, params, bands ({name: [low, high]}), predictions at `points`, held-out error."""
        bands = self.bands
        return {"law": self.law.name, "formula": self.law.formula, "params": self.params,
                "bands": None if bands is None else {k: list(v) for k, v in bands.items()},
                "predictions": [] if points is None else self.predictions(points),
                "holdout_error": self.holdout_error, "holdout_max": self.holdout_max, "holdout_rows": self.holdout_rows,
                "candidates": self.candidates or None, "rows": len(self.loss), "bootstrap": len(self.boot),
                "level": self.level, "seed": self.seed}


def _check(law: Law, points: Points, loss) -> np.ndarray:
    y = np.atleast_1d(np.asarray(loss, dtype=float))
    if len(y) != len(points):
        raise ValueError("one loss per row")
    if not (np.all(np.isfinite(y)) and np.all(y > 0)):
        raise ValueError("loss must be finite and > 0")
    if not points.has(law.needs):
        raise ValueError(f"law {law.name} needs column(s) {', '.join(law.needs)}")
    if len(y) < law.n_params:
        raise ValueError(f"{len(y)} rows are fewer than the {law.n_params} parameters of law {law.name}")
    return y


def compute_weights(C: np.ndarray, power: float = WEIGHT_POWER) -> np.ndarray | None:
    """(C / C_max)^power per rung (None for power 0: the unweighted objective of Besiroglu et al.)."""
    return None if power == 0 else (C / C.max()) ** power


def _best(law: Law, X, y, starts, delta, w=None) -> tuple[np.ndarray, np.ndarray]:
    """The best optimum over the grid starts, and those starts (the bootstrap reuses them)."""
    grid_starts = best_grid_starts(law, X, y, starts, delta, w)
    theta, f = solve(law, X, y, grid_starts, delta, w)
    if not np.isfinite(f).any():
        raise ValueError(f"law {law.name}: no start reached a finite objective")
    return theta[int(np.argmin(f))], grid_starts


def holdout_mask(points: Points, k: int | None = None, by: str = "C") -> np.ndarray:
    """The held-out rows: the k largest rungs in compute (by="C") or in active parameters (by="N"), default
    k = max(1, n // 4), ties included."""
    n = len(points)
    k = max(1, n // 4) if k is None else max(1, k)
    size = points.N if by == "N" else points.C
    threshold = np.sort(size)[::-1][min(k, n) - 1]
    return size >= threshold * (1 - 1e-9)


def _holdout(law: Law, points: Points, y: np.ndarray, k, starts, delta, power, by="C") -> tuple | None:
    """(mean, max |L̂/L − 1| on the held-out rungs, reach ln(C_max / C_max fitted)); None: too few rows left."""
    held = holdout_mask(points, k, by)
    if (~held).sum() < law.n_params:
        return None
    train = points.take(~held)
    theta, _ = _best(law, law.design(train), y[~held], starts, delta, compute_weights(train.C, power))
    err = np.abs(np.expm1(law.log_predict(theta, points.take(held)) - y[held]))
    return float(err.mean()), float(err.max()), float(np.log(points.C.max() / train.C.max()))


def holdout_error(law: Law | str, points: Points, loss, *, k: int | None = None,
                  starts: int | None = DEFAULT_STARTS, delta: float = HUBER_DELTA,
                  power: float = WEIGHT_POWER, by: str = "C") -> float | None:
    """Fit on all but the largest rungs (in compute, or by="N" in parameters), predict those: mean |L̂/L − 1|
    (None: too few rows left)."""
    law = get_law(law) if isinstance(law, str) else law
    out = _holdout(law, points, np.log(_check(law, points, loss)), k, starts, delta, power, by)
    return None if out is None else out[0]


def _resamples(rng: np.random.Generator, n: int, K: int, need: int) -> np.ndarray:
    """K bootstrap index sets; a set with fewer distinct rungs than parameters cannot pin the law: redrawn."""
    idx = rng.integers(0, n, (K, n))
    for _ in range(100):
        bad = np.array([len(np.unique(row)) < need for row in idx], dtype=bool)
        if not bad.any():
            return idx
        idx[bad] = rng.integers(0, n, (int(bad.sum()), n))
    return idx[~bad]


def fit_law(law: Law | str, points: Points, loss, *, bootstrap: int = 200, seed: int = 0, level: float = 0.95,
            starts: int | None = DEFAULT_STARTS, holdout: int | None = None, delta: float = HUBER_DELTA,
            power: float = WEIGHT_POWER, min_margin: float = 0.0, band: str = "bootstrap",
            _held: tuple | None | bool = False) -> Fit:
    """Fit one law to all the rungs, with `bootstrap` rung resamples for the bands (0: no bands). Each rung's
    Huber term weighs (C / C_max)^power (0: unweighted). `min_margin`: the bands' least relative half-width
    (Fit.margin). band="calibrated": the forecast band from pooled and own extrapolation errors
    (calibrate.py), not the bootstrap and margins. `_held`: the held-out fit's result when the
    caller has it (auto), None to skip it, False (default) to run it."""
    law = get_law(law) if isinstance(law, str) else law
    loss = _check(law, points, loss)
    if not 0.0 <= min_margin < 1.0:
        raise ValueError("min_margin must be in [0, 1)")
    if band not in ("bootstrap", "calibrated"):
        raise ValueError("band must be bootstrap or calibrated")
    y, X = np.log(loss), law.design(points)
    w = compute_weights(points.C, power)
    theta, grid_starts = _best(law, X, y, starts, delta, w)
    boot = np.empty((0, law.n_params))
    if bootstrap > 0:
        idx = _resamples(np.random.default_rng(seed), len(y), bootstrap, law.n_params)
        s0 = np.vstack([theta[None], grid_starts[:_BOOT_STARTS]])          # m starts for every resample
        m = len(s0)
        rep = np.repeat(idx, m, axis=0)                                    # (K·m, n): resample i, start j
        tb, fb = solve(law, X[rep], y[rep], np.tile(s0, (len(idx), 1)), delta, None if w is None else w[rep])
        pick = np.argmin(fb.reshape(len(idx), m), axis=1)
        boot = tb.reshape(len(idx), m, -1)[np.arange(len(idx)), pick]
    ho = _holdout(law, points, y, holdout, starts, delta, power) if _held is False else _held
    cal = None
    if band == "calibrated":
        def refit(pts: Points, lss: np.ndarray) -> np.ndarray:
            return _best(law, law.design(pts), np.log(lss), starts, delta, compute_weights(pts.C, power))[0]
        cal = calibrate(law, points, loss, refit, theta)
    return Fit(law=law, theta=theta, points=points, loss=loss, boot=boot, level=level, seed=seed,
               objective=float(huber(law.log_predict(theta, points) - y, delta, w)),
               holdout_error=None if ho is None else ho[0], holdout_max=None if ho is None else ho[1],
               holdout_reach=0.0 if ho is None else ho[2], holdout_rows=int(holdout_mask(points, holdout).sum()),
               min_margin=float(min_margin), calibration=cal)


def fit(points: Points, loss, law: str = "auto", *, candidates: tuple[str, ...] | None = None, **kw) -> Fit:
    """Fit `law`; with law="auto", choose among the candidates (default: every law the columns allow) by
    held-out error: the law with the fewest parameters whose error is within AUTO_MARGIN of the lowest. A law
    with more parameters must extrapolate clearly better to be chosen: the over-trained form nests Chinchilla,
    and on Chinchilla data it wins or loses by noise alone. The held-out rungs are the largest models (by N)
    when the rows have N — a forecast is for a larger model, and rungs large in compute only because they ran
    long say little about that — else the largest in compute; `candidates` holds those errors. The chosen
    fit's own `holdout_error` (and the band's margin) is always the largest-compute one."""
    if law != "auto":
        return fit_law(law, points, loss, **kw)
    names = candidates or tuple(name for name, lw in LAWS.items() if points.has(lw.needs))
    by = "N" if points.N is not None else "C"
    held: dict[str, tuple | None] = {}
    for name in names:
        lw = get_law(name)
        fits = points.has(lw.needs) and len(points) >= lw.n_params
        held[name] = _holdout(lw, points, np.log(_check(lw, points, loss)), kw.get("holdout"),
                              kw.get("starts", DEFAULT_STARTS), kw.get("delta", HUBER_DELTA),
                              kw.get("power", WEIGHT_POWER), by) if fits else None
    errors = {name: None if h is None else h[0] for name, h in held.items()}
    scored = [(get_law(name).n_params, e, name) for name, e in errors.items() if e is not None]
    if not scored:
        raise ValueError(f"auto: {len(points)} rows leave too few to fit any law with the largest-compute "
                         "rung(s) held out")
    lowest = min(e for _, e, _ in scored)
    chosen = min((p, e, name) for p, e, name in scored if e <= lowest * (1 + AUTO_MARGIN) + 1e-12)[2]
    return replace(fit_law(chosen, points, loss, _held=held[chosen] if by == "C" else False, **kw),
                   candidates=errors)
