"""The frozen forecast: hero prediction and loss curve, a content hash that is stable and catches edits."""

from __future__ import annotations

import json

import numpy as np
import pytest

from observatory.scaling import Forecast, Points, canonical_json, fit_law, make_forecast

C = np.geomspace(5.5e19, 9.2e21, 6)                       # the Marin ladder's compute span
LOSS = (1.6 + 95.18 * C**-0.0941) * np.exp(np.random.default_rng(0).normal(0, 0.001, len(C)))
HERO_N, HERO_D = 2.3e10, 1.875e13


def forecast(**kw) -> Forecast:
    f = fit_law("compute", Points.of(C=C), LOSS, bootstrap=kw.pop("bootstrap", 30), seed=kw.pop("seed", 0))
    return make_forecast(f, HERO_N, HERO_D, **kw)


@pytest.fixture(scope="module")
def fc() -> Forecast:
    return forecast()


def test_hero_prediction_and_curve(fc):
    assert fc.law == "compute" and fc.hero["N"] == HERO_N and fc.hero["D"] == HERO_D
    assert fc.hero["C"] == pytest.approx(6 * HERO_N * HERO_D)
    assert fc.hero["low"] <= fc.hero["loss"] <= fc.hero["high"]
    assert fc.hero["loss"] == pytest.approx(1.6 + 95.18 * (6 * HERO_N * HERO_D) ** -0.0941, rel=0.01)
    curve = fc.curve
    assert len(curve["tokens"]) == 128 and curve["tokens"][-1] == HERO_D
    assert curve["tokens"][0] == pytest.approx(HERO_D * 1e-3)
    assert curve["loss"][-1] == fc.hero["loss"]
    assert np.all(np.diff(curve["loss"]) < 0)                       # more tokens, lower forecast
    assert np.all(np.array(curve["low"]) <= curve["loss"]) and np.all(np.array(curve["high"]) >= curve["loss"])
    assert fc.rungs["C"] == pytest.approx(C.tolist()) and fc.rungs["N"] is None


def test_at_evaluates_the_frozen_law_anywhere(fc):
    at = fc.at([fc.curve["tokens"][10], HERO_D, HERO_D / 2])
    assert at["loss"][0] == pytest.approx(fc.curve["loss"][10], rel=1e-9)
    assert at["loss"][1] == pytest.approx(fc.hero["loss"], rel=1e-9)
    assert at["low"][0] == pytest.approx(fc.curve["low"][10]) and at["high"][1] == pytest.approx(fc.hero["high"])
    assert at["low"][2] <= at["loss"][2] <= at["high"][2]


def test_hash_is_stable_across_runs_and_round_trips(fc):
    again = forecast()
    assert again.sha256 == fc.sha256 and again == fc
    text = fc.to_json()
    assert json.loads(text)["sha256"] == fc.sha256
    back = Forecast.from_json(text)
    assert back == fc and back.sha256 == fc.sha256
    # The hash is over canonical JSON: key order and float noise below 12 significant digits do not matter.
    d = fc.to_dict()
    shuffled = dict(reversed(list(d.items())))
    shuffled["params"] = {k: v * (1 + 1e-15) for k, v in reversed(list(d["params"].items()))}
    assert Forecast.from_dict(shuffled).sha256 == fc.sha256


def test_hash_changes_when_anything_changes(fc):
    d = fc.to_dict()
    edited = json.loads(json.dumps(d))
    edited["params"]["alpha"] = d["params"]["alpha"] * 1.001
    with pytest.raises(ValueError, match="hash mismatch"):
        Forecast.from_dict(edited)
    assert Forecast.from_dict(edited, verify=False).sha256 != fc.sha256
    edited = json.loads(json.dumps(d))
    edited["hero"]["loss"] -= 0.01                                # quietly "improve" the forecast
    with pytest.raises(ValueError, match="hash mismatch"):
        Forecast.from_dict(edited)
    assert forecast(seed=1).sha256 != fc.sha256                   # other bootstrap draws, other bands
    assert forecast(points=64).sha256 != fc.sha256


def test_canonical_json_and_refusals():
    assert canonical_json({"b": 1.0, "a": [np.float64(0.1) + 0.2, (1, 2)]}) == '{"a":[0.3,[1,2]],"b":1.0}'
    with pytest.raises(ValueError, match="finite"):
        canonical_json({"x": float("nan")})
    f = fit_law("compute", Points.of(C=C), LOSS, bootstrap=0)
    with pytest.raises(ValueError, match="> 0"):
        make_forecast(f, 0, HERO_D)
    no_bands = make_forecast(f, HERO_N, HERO_D, points=8)
    assert no_bands.bands is None and no_bands.hero["low"] is None and no_bands.curve["low"] is None
    assert Forecast.from_json(no_bands.to_json()) == no_bands
    assert no_bands.at([HERO_D])["low"] is None


def test_hero_flops_counted_like_the_rungs():
    """Rungs whose C column counts more than 6·N·D (Marin's first rung: 5.5e19 FLOPs for 61M active × 48B
    tokens, ~3× 6·N·D): the hero's C is given the same way, and the curve scales it with the tokens."""
    f = fit_law("compute", Points.of(C=C), LOSS, bootstrap=0)
    hero_c = 3.0 * 6 * HERO_N * HERO_D
    fc = make_forecast(f, HERO_N, HERO_D, C=hero_c, points=8)
    assert fc.hero["C"] == hero_c
    assert fc.hero["loss"] == pytest.approx(f.predict(Points.of(C=[hero_c]))[0])
    assert fc.curve["loss"][0] == pytest.approx(f.predict(Points.of(C=[hero_c * 1e-3]))[0])
    assert fc.at([HERO_D / 10])["loss"][0] == pytest.approx(f.predict(Points.of(C=[hero_c / 10]))[0])
    assert fc.hero["loss"] < make_forecast(f, HERO_N, HERO_D, points=8).hero["loss"]


def test_chinchilla_forecast_curve_is_the_law_at_fixed_n():
    N = np.repeat(np.geomspace(3e7, 3e9, 4), 3)
    D = N * np.tile([20.0, 100.0, 500.0], 4)
    truth = {"E": 1.82, "A": 482.01, "B": 2085.43, "alpha": 0.3478, "beta": 0.3658}
    L = truth["E"] + truth["A"] / N ** truth["alpha"] + truth["B"] / D ** truth["beta"]
    fc = make_forecast(fit_law("chinchilla", Points.of(N=N, D=D), L, bootstrap=0), 1e10, 2e12, points=16)
    tokens = np.array(fc.curve["tokens"])
    expected = truth["E"] + truth["A"] / 1e10 ** truth["alpha"] + truth["B"] / tokens ** truth["beta"]
    assert np.allclose(fc.curve["loss"], expected, rtol=1e-6)
