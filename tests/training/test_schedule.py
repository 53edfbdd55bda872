"""The LR schedule: warmup + linear decay or WSD over the budget, continuous re-plans, multiplier, state."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from training.config import TrainSection
from training.errors import ConfigError
from training.schedule import MAX_KNOTS, Schedule

PEAK = 1e-3


def close(a, b, rel=1e-9):
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-18)


def test_linear_warms_up_one_percent_then_decays_to_the_min_ratio():
    s = Schedule(TrainSection(lr=PEAK), total_steps=10_000)
    assert s.warmup_steps == 100
    assert s.lr(0) == 0.0 and close(s.lr(50), PEAK / 2) and close(s.lr(100), PEAK)
    assert close(s.lr(10_000), 0.05 * PEAK) and close(s.lr(20_000), 0.05 * PEAK)
    mid = 100 + (10_000 - 100) / 2
    assert close(s.lr(int(mid)), PEAK * (1 + 0.05) / 2, rel=1e-4)
    lrs = [s.lr(i) for i in range(100, 10_001, 97)]
    assert all(a > b for a, b in zip(lrs, lrs[1:]))


def test_wsd_holds_the_peak_then_decays_over_the_last_fifth():
    s = Schedule(TrainSection(lr=PEAK, schedule="wsd", decay_ratio=0.2), total_steps=1000)
    assert close(s.lr(10), PEAK) and close(s.lr(500), PEAK) and close(s.lr(800), PEAK)
    assert close(s.lr(900), PEAK * (1 + 0.05) / 2) and close(s.lr(1000), 0.05 * PEAK)


@pytest.mark.parametrize("kind", ["linear", "wsd"])
@pytest.mark.parametrize("step,new_total", [(3000, 5000), (3000, 20_000), (50, 4000), (9500, 9600), (850, 900)])
def test_replan_keeps_the_lr_continuous_and_ends_at_the_min_ratio(kind, step, new_total):
    s = Schedule(TrainSection(lr=PEAK, schedule=kind), total_steps=10_000)
    before = s.lr(step)
    payload = s.replan(step, new_total)
    assert close(s.lr(step), before) and close(payload["lr_after"], payload["lr_before"])
    assert close(s.lr(new_total), 0.05 * PEAK) and close(s.lr(new_total + 1000), 0.05 * PEAK)
    assert close(s.lr(step + 1), before, rel=0.05)  # no jump on the next step either
    later = [s.lr(i) for i in range(max(step, s.warmup_steps), new_total + 1)]
    assert all(a >= b - 1e-15 for a, b in zip(later, later[1:]))  # never rises again after warmup
    assert payload["old"]["total_steps"] == 10_000 and payload["new"]["total_steps"] == new_total
    json.dumps(payload)


def test_replan_during_warmup_finishes_the_warmup():
    s = Schedule(TrainSection(lr=PEAK), total_steps=10_000)
    s.replan(40, 2000)
    assert close(s.lr(40), 0.4 * PEAK) and close(s.lr(100), PEAK) and close(s.lr(2000), 0.05 * PEAK)


def test_replan_to_the_past_is_refused():
    s = Schedule(TrainSection(), total_steps=1000)
    with pytest.raises(ConfigError) as e:
        s.replan(500, 500)
    assert e.value.key == "token_budget"


def test_multiplier_scales_on_top_and_survives_a_replan():
    s = Schedule(TrainSection(lr=PEAK), total_steps=1000)
    base = s.lr(400)
    assert s.set_multiplier(0.5) == {"old": 1.0, "new": 0.5}
    assert close(s.lr(400), base / 2)
    s.replan(400, 600)
    assert close(s.lr(400), base / 2) and close(s.lr(600), 0.05 * PEAK / 2)
    for bad in (-1, float("nan"), float("inf"), "2", True):
        with pytest.raises(ConfigError):
            s.set_multiplier(bad)


def test_state_round_trip_after_many_replans():
    s = Schedule(TrainSection(lr=PEAK, schedule="wsd"), total_steps=100_000)
    for i in range(30):
        s.replan(1000 + 500 * i, 90_000 - 1000 * i)
    s.set_multiplier(1.5)
    state = {k: np.array(v) for k, v in s.state_dict().items()}
    assert state["knot_steps"].shape == (MAX_KNOTS,)
    t = Schedule(TrainSection(lr=PEAK, schedule="wsd"), total_steps=100_000)
    t.load_state_dict(state)
    for step in range(15_500, 70_000, 777):
        assert t.lr(step) == s.lr(step)
    assert t.total_steps == s.total_steps == 61_000 and t.replans == 30


@pytest.mark.parametrize("field,value", [("schedule", "cosine"), ("lr", 0.0), ("warmup_ratio", 0.9),
                                         ("min_lr_ratio", 2.0), ("decay_ratio", -0.1)])
def test_a_bad_schedule_setting_names_the_key(field, value):
    with pytest.raises(ConfigError) as e:
        TrainSection(**{field: value})
    assert e.value.key == f"train.{field}"
