"""The pre-registered forecast: a frozen, content-hashed record of a fit and what it predicts for the hero run.

Before the hero starts, the ladder's fit is frozen into a `Forecast`: the law, its parameters and bands, the
rungs it was fitted on, the hero's (N, D) with the predicted final loss and its band, and a curve of predicted
loss over tokens. `sha256` is the SHA-256 of the record's canonical JSON (sorted keys, no spaces, floats at 12
significant digits so that a refit differing in the last bits hashes the same), so anyone holding the JSON can
check later that the forecast was not edited after the fact: `Forecast.from_dict` refuses a record whose hash
does not match its content.

The curve: for each D' ≤ D, the final loss a run of D' tokens at the hero's N is forecast to reach, L(N, D')
(for the compute law, L(C·D'/D) with the hero's C, 6·N·D unless given). A live run with a decaying learning
rate sits above this line until its decay ends and meets it at D, so the web can draw it from the first step
as the "where we should end up" envelope.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass

import numpy as np

from observatory.scaling.fit import Fit
from observatory.scaling.laws import Points, get_law

__all__ = ["Forecast", "make_forecast", "canonical_json", "SIGNIFICANT_DIGITS"]

SIGNIFICANT_DIGITS = 12
CURVE_POINTS = 128
CURVE_START = 1e-3  # the curve begins at this fraction of the hero's tokens (the law diverges at D' → 0)


def _canonical(x):
    if isinstance(x, bool) or x is None or isinstance(x, str):
        return x
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        if not math.isfinite(x):
            raise ValueError(f"a forecast holds only finite numbers, got {x}")
        return float(f"{float(x):.{SIGNIFICANT_DIGITS}g}")
    if isinstance(x, dict):
        return {str(k): _canonical(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, np.ndarray)):
        return [_canonical(v) for v in x]
    raise TypeError(f"cannot put {type(x).__name__} in a forecast")


def canonical_json(obj) -> str:
    """Sorted keys, no whitespace, floats rounded to SIGNIFICANT_DIGITS: equal content → equal bytes."""
    return json.dumps(_canonical(obj), sort_keys=True, separators=(",", ":"), allow_nan=False, ensure_ascii=True)


@dataclass(frozen=True)
class Forecast:
    """A frozen forecast. Lists and dicts only (it is its own JSON); build it with `make_forecast`."""

    law: str
    formula: str
    params: dict            # {name: value}
    bands: dict | None      # {name: [low, high]} at `level`; None without bootstrap
    level: float
    bootstrap: int          # bootstrap refits behind the bands
    seed: int
    holdout_error: float | None
    holdout_rows: int
    rungs: dict             # {"N": [...] | None, "D": [...] | None, "C": [...], "loss": [...]}
    hero: dict              # {"N", "D", "C", "loss", "low", "high"}
    curve: dict             # {"tokens": [...], "loss": [...], "low": [...] | None, "high": [...] | None}

    def content(self) -> dict:
        return _canonical(asdict(self))

    @property
    def sha256(self) -> str:
        return hashlib.sha256(canonical_json(self.content()).encode()).hexdigest()

    def to_dict(self) -> dict:
        return {**self.content(), "sha256": self.sha256}

    def to_json(self) -> str:
        return canonical_json(self.to_dict())

    @classmethod
    def from_dict(cls, d: dict, *, verify: bool = True) -> "Forecast":
        """Rebuild a stored forecast; with verify, its "sha256" must match its content (else ValueError)."""
        fields = {k: d[k] for k in cls.__dataclass_fields__}
        fc = cls(**_canonical(fields))
        if verify and d.get("sha256") != fc.sha256:
            raise ValueError(f"forecast hash mismatch: stored {d.get('sha256')}, content hashes to {fc.sha256}")
        return fc

    @classmethod
    def from_json(cls, text: str, *, verify: bool = True) -> "Forecast":
        return cls.from_dict(json.loads(text), verify=verify)

    def at(self, tokens) -> dict:
        """Forecast at arbitrary token counts (e.g. the steps the web draws): loss from the frozen parameters,
        low/high interpolated (in log tokens) along the stored curve's band, held flat beyond its ends."""
        law = get_law(self.law)
        d = np.atleast_1d(np.asarray(tokens, dtype=float))
        n = np.full_like(d, self.hero["N"])
        pts = Points.of(N=n, D=d, C=self.hero["C"] * d / self.hero["D"])
        with np.errstate(divide="ignore"):                 # E may be 0 at the edge of a band
            loss = law.predict(law.theta_of(self.params), pts)
        out = {"tokens": d.tolist(), "loss": loss.tolist(), "low": None, "high": None}
        if self.curve.get("low") is not None:
            x = np.log(self.curve["tokens"])
            for k in ("low", "high"):
                out[k] = np.interp(np.log(d), x, self.curve[k]).tolist()
        return out


def make_forecast(fit: Fit, N: float, D: float, *, C: float | None = None, points: int = CURVE_POINTS,
                  start: float | None = None) -> Forecast:
    """Freeze `fit` as the forecast for a hero of N active parameters trained on D tokens. The curve runs over
    `points` token counts spaced geometrically from `start` (default D·1e-3) to D.

    C is the hero's training FLOPs for the compute law, default 6·N·D. Pass it when the rungs' C column was
    counted another way (Marin's rungs, 5.5e19 FLOPs for 61M active × 48B tokens, are ~3× 6·N·D: attention and
    embeddings weigh a lot at small width), so the hero is counted the way the rungs were; along the curve
    C scales with the tokens."""
    C = 6.0 * N * D if C is None else C
    if not all(x > 0 and math.isfinite(x) for x in (N, D, C)):
        raise ValueError("the hero's N, D and C must be finite and > 0")
    start = D * CURVE_START if start is None else start
    if not 0 < start < D:
        raise ValueError("the curve must start between 0 and D tokens")
    tokens = np.geomspace(start, D, points)
    tokens[-1] = D                                   # end exactly at the hero's budget
    curve_pts = Points.of(N=np.full(points, float(N)), D=tokens, C=C * tokens / D)
    hero = fit.predictions(Points.of(N=[N], D=[D], C=[C]))[0]
    band = fit.interval(curve_pts)
    bands = fit.bands
    p = fit.points
    fields = dict(
        law=fit.law.name, formula=fit.law.formula, params=fit.params,
        bands=None if bands is None else {k: list(v) for k, v in bands.items()},
        level=fit.level, bootstrap=len(fit.boot), seed=fit.seed,
        holdout_error=fit.holdout_error, holdout_rows=fit.holdout_rows,
        rungs={"N": None if p.N is None else p.N.tolist(), "D": None if p.D is None else p.D.tolist(),
               "C": p.C.tolist(), "loss": fit.loss.tolist()},
        hero=hero,
        curve={"tokens": tokens.tolist(), "loss": fit.predict(curve_pts).tolist(),
               "low": None if band is None else band[0].tolist(),
               "high": None if band is None else band[1].tolist()},
    )
    return Forecast(**_canonical(fields))  # stored as its JSON will read back, so a round trip is equal
