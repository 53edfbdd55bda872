"""Scaling laws for the ladder: robust fits with bootstrap bands, held-out law choice, pre-registered forecasts.

Pure (numpy only). N is ACTIVE parameters (MoE: per token), D tokens, C ≈ 6·N·D FLOPs. See docs/SCALING.md.

    laws      the forms (chinchilla, compute, overtrained), `Points` (the rows: N, D, C)
    solver    the Huber objective of Besiroglu et al. 2024 and its multi-start minimiser
    fit       `fit` / `fit_law` → `Fit` (params, bands, predictions, held-out error), `auto`
    calibrate the calibrated band (band="calibrated"): width from pooled and own extrapolation errors
    forecast  `make_forecast` → `Forecast` (frozen, content-hashed record for the hero run)
    registration  the pre-registration record (forecast + experiment + rung runs + target config hash), hashed
    cli       python -m observatory.scaling fit|forecast FILE.csv ...
"""

from observatory.scaling.fit import Fit, fit, fit_law, holdout_error, holdout_mask
from observatory.scaling.forecast import Forecast, canonical_json, make_forecast
from observatory.scaling.laws import CHINCHILLA, COMPUTE, LAWS, OVERTRAINED, Law, Points, get_law

__all__ = ["Fit", "fit", "fit_law", "holdout_error", "holdout_mask", "Forecast", "canonical_json",
           "make_forecast", "CHINCHILLA", "COMPUTE", "LAWS", "OVERTRAINED", "Law", "Points", "get_law"]
