"""The calibrated forecast band: its width from the ladder's own extrapolation errors, by a rule fixed here.

A forecast misses by the law's extrapolation error, which grows with how far the forecast reaches beyond the rungs.
The rule (docs/SCALING.md, "Calibrated bands"):

1. **Distance** of a point from the rungs fitted: d = max(0, ln(N / N_max), ln(C / C_max)) (the N term only when
   the rows have N): a larger model or a larger budget than any rung; 0 inside the ladder.
2. **Errors within the ladder** (rolling origin): refit the chosen law with the rungs' top removed — the 1 to
   SIZE_FOLDS largest model sizes (rows with N), and the largest n // 8 and n // 4 rows in compute — and record each
   removed rung's log error |ln L̂ − ln L| with its distance from the rungs kept. Folds that leave fewer rows
   than the law has parameters, or no rung removed, are skipped; identical folds count once.
3. **Scale**: r_i = |e_i| / (D0 + d_i), errors per unit of reach (D0 e-folds: interpolation error counts as
   that of a forecast D0 e-folds out); s = the larger of the `level` quantile of the r_i and the normal-theory
   prediction bound for one more such error, t_k · RMS(r), t_k the two-sided `level` quantile of Student's t with
   k = the number of r_i. With many errors (the public ladders: 32–88) the quantile rules; with few it is no
   quantile at all (a 4-rung compute ladder has one fold: the largest rung from the three below, which a 3-parameter
   law fits exactly), and the bound widens by t_1 = 3.08 for one error, t_2 = 1.89 for two (issue 48).
4. **Band** at distance d: L̂·exp(±h), h = max(s·(D0 + d), q), q the `level` quantile of the full fit's own
   |log residuals| (the scatter of runs about the law, the least a forecast can miss by).

`level` is the band's nominal coverage (0.8). Nothing here is per ladder or per config: the rule, D0 and the folds
were fixed before the held-out ladders were scored (bench/data/heldout/README.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from observatory.scaling.laws import Law, Points

__all__ = ["Calibration", "D0", "LEVEL", "SIZE_FOLDS", "distance", "calibrate", "folds", "scale_of", "t_quantile"]

# Chosen by leave-one-ladder-out cross-validation on the development ladders only (bench/scaling_cv.py), before
# the held-out ladders were scored; fixed here, the same for every ladder and config.
D0 = 1.0        # e-folds: the reach an interpolation error is counted at
SIZE_FOLDS = 2  # rolling-origin folds removing the 1..SIZE_FOLDS largest model sizes
LEVEL = 0.8     # nominal coverage of the calibrated band


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

    def half_width(self, points: Points) -> np.ndarray:
        d = distance(points, self.n_max, self.c_max)
        return np.maximum(self.scale * (self.d0 + d), self.floor)


def distance(points: Points, n_max: float | None, c_max: float) -> np.ndarray:
    """max(0, ln(N / n_max), ln(C / c_max)) per point (the N term only when both have N)."""
    d = np.maximum(0.0, np.log(points.C / c_max))
    if n_max is not None and points.N is not None:
        d = np.maximum(d, np.log(points.N / n_max))
    return d


def folds(points: Points, size_folds: int = 3) -> list[tuple[str, np.ndarray]]:
    """(label, mask of the rungs held out) per rolling-origin fold (rule 2), distinct: "N1".."N3" remove the
    1..3 largest model sizes, "C8" / "C4" the largest n // 8 / n // 4 rows in compute."""
    n, masks = len(points), []
    if points.N is not None:
        sizes = np.unique(points.N)[::-1]
        masks += [(f"N{j + 1}", points.N >= sizes[j] * (1 - 1e-9)) for j in range(min(size_folds, len(sizes) - 1))]
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


def t_quantile(p: float, k: int) -> float:
    """Student's t quantile at probability p with k degrees of freedom: exact for k = 1 and 2, else the
    Cornish-Fisher expansion to 1/k^3 (within 0.1% of the exact value at p = 0.9, k >= 3)."""
    if k == 1:
        return math.tan(math.pi * (p - 0.5))
    if k == 2:
        return (2 * p - 1) / math.sqrt(2 * p * (1 - p))
    z = NormalDist().inv_cdf(p)
    return (z + (z ** 3 + z) / (4 * k) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * k ** 2)
            + (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / (384 * k ** 3))


def scale_of(errors, size_folds: int = SIZE_FOLDS, d0: float = D0, level: float = LEVEL) -> float | None:
    """Rule 3 on recorded fold errors r = |e| / (d0 + d) over the folds allowed: max(the `level` quantile of r,
    t_k · RMS(r)), the second the prediction bound for one more error when only k are known."""
    r = np.array([e / (d0 + d) for fold, d, e in errors if not (fold.startswith("N") and int(fold[1:]) > size_folds)])
    if not r.size:
        return None
    return max(float(np.quantile(r, level)), t_quantile((1 + level) / 2, r.size) * float(np.sqrt(np.mean(r * r))))


def calibrate(law: Law, points: Points, loss: np.ndarray, refit, theta: np.ndarray, level: float = LEVEL,
              size_folds: int = SIZE_FOLDS, d0: float = D0, record_folds: int = 3) -> Calibration:
    """The calibration of a fit (θ on all the rungs). `refit(points, loss) -> θ` fits the same law the same way
    on a subset (fit.py passes its own multi-start fit)."""
    if not 0.0 < level < 1.0:
        raise ValueError("level must be in (0, 1)")
    y = np.log(loss)
    resid = np.abs(law.log_predict(theta, points) - y)
    errors = []
    for fold, held in folds(points, max(size_folds, record_folds)):
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
    scale = scale_of(errors, size_folds, d0, level)
    return Calibration(scale=floor / d0 if scale is None else scale, floor=floor, level=level, n_max=n_max,
                       c_max=float(points.C.max()), d0=d0, errors=tuple(errors))
