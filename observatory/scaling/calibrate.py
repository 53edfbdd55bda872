"""The calibrated forecast band: its width from a POOLED rule fixed here, shrunk towards the ladder's own errors.

A forecast misses by the law's extrapolation error, which grows with how far the forecast reaches beyond the rungs.
The rule (docs/SCALING.md, "Calibrated bands"):

1. **Distance** of a point from the rungs fitted: d = max(0, ln(N / N_max), ln(C / C_max)) (the N term only when
   the rows have N): a larger model or a larger budget than any rung; 0 inside the ladder.
2. **Errors within a ladder** (rolling origin): refit the chosen law with the rungs' top removed — the 1 to
   SIZE_FOLDS largest model sizes (rows with N), and the largest n // 8 and n // 4 rows in compute — and record each
   removed rung's log error |ln L̂ − ln L| with its distance from the rungs kept. Folds that leave fewer rows
   than the law has parameters, or no rung removed, are skipped, and so are size folds that leave a law with an
   N term fewer model sizes than that term has parameters (MIN_KEPT_SIZES); identical folds count once. Each
   error per unit of reach: r = |e| / (D0 + d) (interpolation error counts as that of a forecast D0 e-folds out).
3. **The pooled prior** (`Prior`, `pooled_prior`): the r of rule 2 on the DEVELOPMENT ladders only (Chinchilla,
   Gadre et al. ×3: bench/scaling_cv.py; no held-out ladder), each ladder weighing 1 whatever its count of errors:
   S = their `level` quantile, M2 = their mean (r / S)², and ν0 = max(1, round(1 / (2·var ln RMS_l))), the weight
   of the prior in fold errors, from how much the ladders' own scales RMS_l differ (for a scaled-inverse-χ² prior
   on the variance, var ln σ ≈ 1 / (2·ν0)). Fixed in code (POOLED); the bench recomputes it and checks the code.
4. **Scale**, shrinking the prior by the ladder's own k errors, the prior counting as ν0 of them:
   s = λ·S, λ² = (ν0 + Σ (r_i / S)² / M2) / (ν0 + k). A ladder with no fold (k = 0) gets S; one with one error
   (a 4–7-rung compute ladder) the prior weighted ν0 (2 now) against that error's 1; one with 30–90 (the public
   ladders) its own.
5. **Band** at distance d: L̂·exp(±h), h = max(s·(D0 + d), q), q the `level` quantile of the full fit's own
   |log residuals| (the scatter of runs about the law, the least a forecast can miss by).
6. **Reach** (`reach`, `reach_only`; two candidates, issue 48, registered before the fifth held-out set was scored;
   off, 0, unless adopted): REACH is the `level` quantile of |ln(L̂ / L)| / (D0 + d) over the held-out points of
   the spent ladders (development data: 4 development ladders and held-out sets 1-4, 20 ladders, 9 sources, each
   source weighing 1: `pooled_prior` on them): forecasts' own errors, not folds' (rolling-origin folds reach less
   far than a forecast, and on the loss-to-loss and Pythia ladders their errors fell short of the forecasts').
   "reach band" (`reach_only`): s = REACH, the ladder's folds unused; "reach floor": s = max(s of rule 4, REACH).

`level` is the band's nominal coverage (0.8). Nothing here is per ladder or per config. The rule replaced (issue
48) a per-ladder one (s = the 80% quantile of the ladder's own r, at least t_k·RMS) that on a 4-rung ladder rested
on one error; it was chosen knowing that the dense demo ladder's target had missed its band (docs/SCALING.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from observatory.scaling.laws import Law, Points

__all__ = ["Calibration", "D0", "LEVEL", "MIN_KEPT_SIZES", "POOLED", "Prior", "REACH", "SIZE_FOLDS", "distance",
           "calibrate", "folds", "pooled_prior", "reach_errors", "scale_of"]

# Chosen by leave-one-ladder-out cross-validation on the development ladders only (bench/scaling_cv.py), before
# the held-out ladders were scored; fixed here, the same for every ladder and config.
D0 = 1.0        # e-folds: the reach an interpolation error is counted at
SIZE_FOLDS = 2  # rolling-origin folds removing the 1..SIZE_FOLDS largest model sizes
# A size fold must keep at least as many model sizes as a law's N term has parameters (E, A, α): with fewer, the
# refit's optimum is not determined by the data (many optima tie to rounding and forecast the removed sizes 1-13%
# apart, so which one wins depends on the BLAS kernel: docs/SCALING.md "The pooled prior's provenance").
MIN_KEPT_SIZES = 3
LEVEL = 0.8     # nominal coverage of the calibrated band


@dataclass(frozen=True)
class Prior:
    """The pooled prior of rule 3: S (the `level` quantile of r), M2 (mean (r / S)²), ν0 (its weight in errors)."""

    scale: float
    m2: float
    weight: int
    level: float = LEVEL


# Rule 3 on the development ladders' fits (bench/scaling_cv.py `development()["pooled_prior"]`, 3 significant
# digits), with SIZE_FOLDS, MIN_KEPT_SIZES, D0 and LEVEL above: the same for every ladder and config, and the same
# on OpenBLAS's Haswell and SkylakeX kernels (before MIN_KEPT_SIZES, Gadre N2 folds tied and it was not:
# 0.0228, 0.534, 1 on Haswell; 0.0168, 0.710, 1 on SkylakeX; docs/SCALING.md).
POOLED = Prior(scale=0.015, m2=0.543, weight=2)
# Rule 6 on the 20 spent ladders' held-out points (bench/scaling_cv.py `development()["reach"]`, 3 digits).
REACH = 0.00981


@dataclass(frozen=True)
class Calibration:
    """The band's scale: half-width h(d) = max(scale·(D0 + d), floor) in log loss; N_max, C_max of the rungs."""

    scale: float
    floor: float
    level: float
    n_max: float | None
    c_max: float
    d0: float = D0
    errors: tuple = ()      # ((fold, distance, |log error|), ...): every fold's, `scale` from those allowed
    prior: Prior = POOLED   # the pooled prior `scale` was shrunk from
    reach: float = 0.0      # rule 6: REACH, the scale's floor (0: off) ...
    reach_only: bool = False  # ... or the scale itself

    def under(self, size_folds: int, d0: float, prior: Prior) -> "Calibration":
        """The same fit's calibration under other band options: its recorded errors, another D0 and prior."""
        return replace(self, scale=scale_of(self.errors, size_folds, d0, self.level, prior), d0=d0, prior=prior)

    def half_width(self, points: Points) -> np.ndarray:
        d = distance(points, self.n_max, self.c_max)
        scale = self.reach if self.reach_only else max(self.scale, self.reach)
        return np.maximum(scale * (self.d0 + d), self.floor)


def distance(points: Points, n_max: float | None, c_max: float) -> np.ndarray:
    """max(0, ln(N / n_max), ln(C / c_max)) per point (the N term only when both have N)."""
    d = np.maximum(0.0, np.log(points.C / c_max))
    if n_max is not None and points.N is not None:
        d = np.maximum(d, np.log(points.N / n_max))
    return d


def folds(points: Points, size_folds: int = 3, min_kept_sizes: int = 1) -> list[tuple[str, np.ndarray]]:
    """(label, mask of the rungs held out) per rolling-origin fold (rule 2), distinct: "N1".."N3" remove the
    1..3 largest model sizes, each only while at least `min_kept_sizes` sizes stay (calibrate passes
    MIN_KEPT_SIZES for a law with an N term), "C8" / "C4" the largest n // 8 / n // 4 rows in compute."""
    n, masks = len(points), []
    if points.N is not None:
        sizes = np.unique(points.N)[::-1]
        allowed = min(size_folds, len(sizes) - max(1, min_kept_sizes))
        masks += [(f"N{j + 1}", points.N >= sizes[j] * (1 - 1e-9)) for j in range(max(0, allowed))]
    order = np.argsort(points.C)[::-1]
    for label, k in (("C8", max(1, n // 8)), ("C4", max(1, n // 4))):
        m = np.zeros(n, dtype=bool)
        m[order[:k]] = True
        masks.append((label, m))
    out: list[tuple[str, np.ndarray]] = []
    for label, m in masks:
        if m.any() and not m.all() and not any(np.array_equal(m, o) for _, o in out):
            out.append((label, m))
    return out


def reach_errors(errors, size_folds: int = SIZE_FOLDS, d0: float = D0) -> np.ndarray:
    """r = |e| / (d0 + d) of rule 2 for the recorded fold errors of the folds allowed (N folds up to size_folds)."""
    return np.array([e / (d0 + d) for fold, d, e in errors
                     if not (fold.startswith("N") and int(fold[1:]) > size_folds)], dtype=float)


def pooled_prior(error_sets, size_folds: int = SIZE_FOLDS, d0: float = D0, level: float = LEVEL) -> Prior:
    """Rule 3 on the recorded fold errors of several ladders (one set each; each ladder weighs 1): the ladder-
    weighted `level` quantile S of r (the least r whose weighted share at or below it reaches `level`), M2, ν0."""
    rs = [r for r in (reach_errors(e, size_folds, d0) for e in error_sets) if r.size]
    if len(rs) < 2:
        raise ValueError("a pooled prior needs the fold errors of at least two ladders")
    r, w = np.concatenate(rs), np.concatenate([np.full(x.size, 1.0 / x.size) for x in rs])
    order = np.argsort(r, kind="stable")
    share = np.cumsum(w[order]) / w.sum()
    scale = float(r[order][min(np.searchsorted(share, level - 1e-12), r.size - 1)])
    m2 = float(np.sum(w * (r / scale) ** 2) / w.sum())
    spread = float(np.var([0.5 * np.log(np.mean(x * x)) for x in rs], ddof=1))
    return Prior(scale=scale, m2=m2, weight=max(1, round(0.5 / spread)) if spread > 0 else 1000, level=level)


def scale_of(errors, size_folds: int = SIZE_FOLDS, d0: float = D0, level: float = LEVEL,
             prior: Prior = POOLED) -> float:
    """Rule 4 on recorded fold errors: s = λ·S, λ² = (ν0 + Σ (r / S)² / M2) / (ν0 + k) over the k folds allowed.
    `prior` must be the one pooled with the same size_folds, d0 and level (POOLED is for the code's)."""
    if prior.level != level:
        raise ValueError(f"the prior is the {prior.level} quantile, the band's level is {level}")
    u = reach_errors(errors, size_folds, d0) / prior.scale
    return prior.scale * math.sqrt((prior.weight + float(np.sum(u * u)) / prior.m2) / (prior.weight + u.size))


def calibrate(law: Law, points: Points, loss: np.ndarray, refit, theta: np.ndarray, level: float = LEVEL,
              size_folds: int = SIZE_FOLDS, d0: float = D0, record_folds: int = 3,
              prior: Prior = POOLED, reach: float = 0.0, reach_only: bool = False) -> Calibration:
    """The calibration of a fit (θ on all the rungs). `refit(points, loss) -> θ` fits the same law the same way
    on a subset (fit.py passes its own multi-start fit)."""
    if not 0.0 < level < 1.0:
        raise ValueError("level must be in (0, 1)")
    y = np.log(loss)
    resid = np.abs(law.log_predict(theta, points) - y)
    errors = []
    min_sizes = MIN_KEPT_SIZES if "N" in law.needs else 1
    for fold, held in folds(points, max(size_folds, record_folds), min_sizes):
        keep = ~held
        if keep.sum() < law.n_params:
            continue
        kept = points.take(keep)
        th = refit(kept, loss[keep])
        if th is None:
            continue
        e = np.abs(law.log_predict(th, points.take(held)) - y[held])
        d = distance(points.take(held), None if kept.N is None else float(kept.N.max()), float(kept.C.max()))
        errors += [(fold, di, ei) for di, ei in zip(d.tolist(), e.tolist())]
    n_max = None if points.N is None else float(points.N.max())
    floor = float(np.quantile(resid, level))
    return Calibration(scale=scale_of(errors, size_folds, d0, level, prior), floor=floor, level=level, n_max=n_max,
                       c_max=float(points.C.max()), d0=d0, errors=tuple(errors), prior=prior, reach=reach,
                       reach_only=reach_only)
