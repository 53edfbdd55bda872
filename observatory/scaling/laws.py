"""The scaling-law forms (chinchilla, compute, overtrained): each is log L = logsumexp of terms linear in its
log-space parameters. Their parameterisation, N, D and C, and why the over-trained form: docs/SCALING.md "The law
forms in detail".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

__all__ = ["Points", "Law", "LAWS", "CHINCHILLA", "COMPUTE", "OVERTRAINED", "get_law", "lse"]

FLOPS_PER_PARAM_TOKEN = 6.0  # forward + backward, per active parameter per token


@dataclass(frozen=True)
class Points:
    """Rungs or query points: N active parameters, D tokens, C FLOPs (6·N·D unless measured and given)."""

    N: np.ndarray | None
    D: np.ndarray | None
    C: np.ndarray

    @classmethod
    def of(cls, N=None, D=None, C=None) -> "Points":
        arrays = {k: None if v is None else np.atleast_1d(np.asarray(v, dtype=float)) for k, v in
                  (("N", N), ("D", D), ("C", C))}
        if (arrays["N"] is None) != (arrays["D"] is None):
            raise ValueError("N and D come together (C = 6·N·D needs both)")
        if arrays["C"] is None:
            if arrays["N"] is None:
                raise ValueError("give N and D, or C")
            arrays["C"] = FLOPS_PER_PARAM_TOKEN * arrays["N"] * arrays["D"]
        lengths = {len(v) for v in arrays.values() if v is not None}
        if len(lengths) != 1:
            raise ValueError("N, D and C must have the same length")
        for k, v in arrays.items():
            if v is not None and not (np.all(np.isfinite(v)) and np.all(v > 0)):
                raise ValueError(f"{k} must be finite and > 0")
        return cls(**arrays)

    def __len__(self) -> int:
        return len(self.C)

    def take(self, idx) -> "Points":
        pick = (lambda a: None if a is None else a[idx])
        return Points(pick(self.N), pick(self.D), self.C[idx])

    def has(self, needs: tuple[str, ...]) -> bool:
        return all(getattr(self, k) is not None for k in needs)


def lse(t: np.ndarray) -> np.ndarray:
    """logsumexp over the last axis, stable for the large negative terms small losses produce."""
    m = t.max(axis=-1, keepdims=True)
    return (m + np.log(np.exp(t - m).sum(axis=-1, keepdims=True)))[..., 0]


@dataclass(frozen=True)
class Law:
    """One form: its log-space parameters θ, design X(points), the grid of starts, and θ → named parameters."""

    name: str
    formula: str
    theta_names: tuple[str, ...]
    param_names: tuple[str, ...]   # the reported (natural) parameters, in order
    needs: tuple[str, ...]         # which of N, D, C the rows must have
    grid: tuple[tuple[float, ...], ...]
    design: Callable[[Points], np.ndarray]
    logs: tuple[int, ...]          # indices of θ that are log-coefficients (reported as exp(θ))
    bounds: tuple[tuple[float, float], ...]
    cite: str

    @property
    def n_params(self) -> int:
        return len(self.theta_names)

    def log_predict(self, theta: np.ndarray, points: Points) -> np.ndarray:
        """log L at `points`; theta may be (p,) or (K, p) for K parameter sets at once."""
        X = self.design(points)
        return lse(np.einsum("nkp,...p->...nk", X, np.asarray(theta, dtype=float)))

    def predict(self, theta, points: Points) -> np.ndarray:
        return np.exp(self.log_predict(theta, points))

    def natural(self, theta: np.ndarray) -> np.ndarray:
        """θ (…, p) → the reported parameters (…, p): log-coefficients exponentiated, the rest as they are."""
        out = np.array(theta, dtype=float)
        out[..., list(self.logs)] = np.exp(out[..., list(self.logs)])
        return out

    def theta_of(self, params: dict[str, float]) -> np.ndarray:
        """The inverse of `natural`: named parameters (as reported) → θ."""
        theta = np.array([float(params[k]) for k in self.param_names])
        theta[list(self.logs)] = np.log(theta[list(self.logs)])
        return theta

    def grid_points(self) -> np.ndarray:
        return np.stack(np.meshgrid(*self.grid, indexing="ij"), axis=-1).reshape(-1, self.n_params)


def _stack(n: int, *terms: list) -> np.ndarray:
    """Terms, each a list of p columns (scalars or (n,) arrays) → the (n, k, p) design tensor."""
    return np.stack([np.stack([np.broadcast_to(np.asarray(c, float), (n,)) for c in t], axis=-1)
                     for t in terms], axis=1)


def _chinchilla(pts: Points) -> np.ndarray:
    n, lN, lD = len(pts), np.log(pts.N), np.log(pts.D)
    # θ = (e, a, b, α, β): log L = LSE(a − α·ln N, b − β·ln D, e)
    return _stack(n, [0, 1, 0, -lN, 0], [0, 0, 1, 0, -lD], [1, 0, 0, 0, 0])


def _compute(pts: Points) -> np.ndarray:
    n, lC = len(pts), np.log(pts.C)
    # θ = (e, a, α): log L = LSE(a − α·ln C, e)
    return _stack(n, [0, 1, -lC], [1, 0, 0])


N0 = 1e9  # the over-trained form's reference size: its β is the data exponent of a 1e9-active-parameter model


def _overtrained(pts: Points) -> np.ndarray:
    n, lN, lD = len(pts), np.log(pts.N), np.log(pts.D)
    # θ = (e, a, b, α, β, γ): log L = LSE(a − α·ln N, b − (β + γ·ln(N/N₀))·ln D, e)
    return _stack(n, [0, 1, 0, -lN, 0, 0], [0, 0, 1, 0, -lD, -(lN - np.log(N0)) * lD], [1, 0, 0, 0, 0, 0])


_E = (-1.0, -0.5, 0.0, 0.5, 1.0)
_COEF = (0.0, 5.0, 10.0, 15.0, 20.0, 25.0)
_EXP = (0.0, 0.5, 1.0, 1.5, 2.0)
_FREE = (-np.inf, np.inf)
_EXP_BOUNDS = (0.0, 5.0)  # a negative exponent would mean loss grows with scale

# The grid of Hoffmann et al. 2022 / Besiroglu et al. 2024 (4500 starts).
CHINCHILLA = Law(
    name="chinchilla", formula="L = E + A/N^alpha + B/D^beta",
    theta_names=("e", "a", "b", "alpha", "beta"), param_names=("E", "A", "B", "alpha", "beta"),
    needs=("N", "D"), grid=(_E, _COEF, _COEF, _EXP, _EXP), design=_chinchilla, logs=(0, 1, 2),
    bounds=(_FREE, _FREE, _FREE, _EXP_BOUNDS, _EXP_BOUNDS),
    cite="Hoffmann et al. 2022 (arXiv:2203.15556) Eq. 2; fitted as Besiroglu et al. 2024 (arXiv:2404.10102)",
)

# Compute exponents are small (≈0.05–0.2) and ln C ≈ 45–60, so the coefficient grid reaches further.
COMPUTE = Law(
    name="compute", formula="L = E + A*C^-alpha",
    theta_names=("e", "a", "alpha"), param_names=("E", "A", "alpha"),
    needs=("C",), grid=(_E, tuple(np.arange(0.0, 32.5, 2.5)), (0.02, 0.05, 0.1, 0.2, 0.35, 0.5, 1.0)),
    design=_compute, logs=(0, 1), bounds=(_FREE, _FREE, _EXP_BOUNDS),
    cite="the isoflop ladder fit (Marin); Hoffmann et al. 2022's compute-optimal frontier L(C)",
)

# γ is bounded so that the data exponent stays sane over 1e6..1e13 parameters (|ln(N/N₀)| ≤ 9.3).
OVERTRAINED = Law(
    name="overtrained", formula="L = E + A/N^alpha + B/D^(beta + gamma*ln(N/1e9))",
    theta_names=("e", "a", "b", "alpha", "beta", "gamma"), param_names=("E", "A", "B", "alpha", "beta", "gamma"),
    needs=("N", "D"), grid=(_E, _COEF, _COEF, _EXP, _EXP, (-0.02, 0.0, 0.02)), design=_overtrained,
    logs=(0, 1, 2), bounds=(_FREE, _FREE, _FREE, _EXP_BOUNDS, _EXP_BOUNDS, (-0.1, 0.1)),
    cite="Li et al. 2025, 'Farseer: a refined scaling law in large language models' (arXiv:2506.10972): "
         "first order in ln N of its N-dependent data term B(N)·D^-A(N), on Hoffmann et al. 2022's form",
)

LAWS: dict[str, Law] = {law.name: law for law in (CHINCHILLA, COMPUTE, OVERTRAINED)}


def get_law(name: str) -> Law:
    try:
        return LAWS[name]
    except KeyError:
        raise ValueError(f"unknown law {name!r} (known: {', '.join(LAWS)})") from None
