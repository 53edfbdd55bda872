"""forecast_deviation: a run that follows its pre-registered forecast raises nothing; one that drifts above it
raises exactly one episode; the detector survives snapshot/restore and rewinds like the others."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from observatory import contract
from observatory.anomalies import Monitor
from observatory.anomalies.forecast import KIND, ForecastDetector
from observatory.scaling import Points, canonical_json, fit_law, make_forecast

N, D, STEPS = 2e7, 4e9, 1000
TPS = D / STEPS


def registration(run_id: str = "hero", bootstrap: int = 20) -> dict:
    """A registration record as the trainer publishes it: a fitted synthetic ladder, frozen and hashed."""
    C = np.geomspace(1e15, 1e17, 5)
    loss = (1.8 + 60 * C**-0.1) * np.exp(np.random.default_rng(0).normal(0, 0.002, len(C)))
    fc = make_forecast(fit_law("compute", Points.of(C=C), loss, bootstrap=bootstrap, seed=0), N, D)
    rec = {"kind": "observatory.forecast_registration", "version": 1,
           "experiment": {"name": "demo", "goal": "g", "hypothesis": "h"}, "forecast": fc.to_dict(),
           "rung_runs": ["r1", "r2"], "target": {"config_hash": "0" * 64, "run_id": run_id, "N": N, "D": D,
                                                  "x": "tokens"}, "created_at": 1.7e9}
    rec = json.loads(canonical_json(rec))
    rec["sha256"] = hashlib.sha256(canonical_json(rec).encode()).hexdigest()
    return rec


@pytest.fixture(scope="module")
def reg():
    return registration()


def curve_at(reg, tokens):
    c = reg["forecast"]["curve"]
    return float(np.interp(np.log(tokens), np.log(c["tokens"]), c["loss"]))


def run(reg, shape, steps=range(1, STEPS + 1), mon=None, eval_every=0, noise=0.003, seed=1):
    """Feed a Monitor a run whose loss at step s is forecast(tokens) · shape(tokens / D) · noise."""
    mon = mon or Monitor()
    if mon.forecast_sha is None:
        mon.set_forecast(mon.forecast_band(reg))
    rng = np.random.default_rng(seed)
    events = []
    for s in steps:
        t = s * TPS
        y = curve_at(reg, max(t, reg["forecast"]["curve"]["tokens"][0])) * shape(t / D)
        values = {contract.M_LOSS: y * (1 + rng.normal(0, noise)), contract.M_TOTAL_TOKENS: t}
        if eval_every and s % eval_every == 0:
            values[contract.M_EVAL_LOSS] = y * (1 + rng.normal(0, noise / 3))
        events += [e for e in mon.observe(s, values) if e.anomaly.kind == KIND]
    return mon, events


def healthy(f):  # above the final-loss envelope while the LR decays (4% at the start), meeting it at D
    return 1 + 0.04 * (1 - f)


def drifting(f):  # fine for the first half, then 10% worse per half run
    return healthy(f) + max(0.0, f - 0.5) * 0.2


def test_a_run_that_follows_its_forecast_raises_nothing(reg):
    _, events = run(reg, healthy)
    assert events == []
    _, events = run(reg, healthy, eval_every=25)
    assert events == []


def test_a_run_that_drifts_above_raises_exactly_one(reg):
    mon, events = run(reg, drifting)
    keys = {e.anomaly.key for e in events}
    assert len(keys) == 1 and events[0].action == "opened"
    a = events[-1].anomaly
    assert a.metric == contract.M_LOSS and a.end_step is None and "above the pre-registered band" in a.explanation
    assert a.start_step * TPS >= 0.5 * D  # nothing is judged before half the budget
    assert [x.kind for x in mon.open_anomalies()].count(KIND) == 1


def test_eval_loss_is_preferred_and_each_eval_is_one_evaluation(reg):
    _, events = run(reg, drifting, eval_every=25)
    assert len({e.anomaly.key for e in events}) == 1
    first = events[0]
    assert first.anomaly.metric == contract.M_EVAL_LOSS and first.anomaly.start_step % 25 == 0
    assert first.at - first.anomaly.start_step == 4 * 25  # the 5th evaluation outside opens it


def test_below_the_band_is_a_deviation_too(reg):
    _, events = run(reg, lambda f: 1 - 0.08 * f)
    assert len({e.anomaly.key for e in events}) == 1 and "below" in events[0].anomaly.explanation


def test_no_forecast_no_detector(reg):
    mon = Monitor()
    events = []
    for s in range(1, 200):  # far above any forecast, and past D
        events += mon.observe(s, {contract.M_LOSS: 50.0 + s, contract.M_TOTAL_TOKENS: s * TPS * 10})
    assert all(e.anomaly.kind != KIND for e in events) and mon.forecast_sha is None


def test_snapshot_restore_gives_the_same_events(reg):
    _, whole = run(reg, drifting)
    mon, first = run(reg, drifting, steps=range(1, 700))
    blob = json.loads(json.dumps(mon.snapshot(), allow_nan=False))
    again = Monitor().restore(blob)
    assert again.forecast_sha == reg["sha256"]
    _, rest = run(reg, drifting, steps=range(700, STEPS + 1), mon=again)
    # the noise of the second half is drawn afresh: compare the episode, not every update
    assert {e.anomaly.key for e in first + rest} == {e.anomaly.key for e in whole}


def test_rewind_supersedes_an_episode_that_began_after_it(reg):
    mon, events = run(reg, drifting)
    start = events[0].anomaly.start_step
    gone = [e for e in mon.rewind(start - 10) if e.anomaly.kind == KIND]
    assert [e.action for e in gone] == ["superseded"]
    assert all(a.kind != KIND for a in mon.open_anomalies())


def test_the_same_forecast_again_keeps_the_count_and_the_band_is_small(reg):
    det = ForecastDetector()
    band = det.band_of(reg)
    assert band["tokens"][0] < 0.5 * D <= band["tokens"][1] and band["tokens"][-1] == D
    assert len(json.dumps(band)) < 2000
    mon, _ = run(reg, drifting, steps=range(1, 800))
    before = mon.snapshot()["forecast"]
    mon.set_forecast(mon.forecast_band(reg))  # a restart republishes it
    assert mon.snapshot()["forecast"] == before


def test_a_forecast_without_bands_uses_a_relative_band():
    reg = registration(bootstrap=0)
    assert reg["forecast"]["curve"]["low"] is None
    _, events = run(reg, healthy)
    assert events == []
    _, events = run(reg, drifting)
    assert len({e.anomaly.key for e in events}) == 1


def test_unusable_records_are_refused():
    with pytest.raises(ValueError):
        ForecastDetector().band_of({"forecast": {}, "target": {"D": 1}})
