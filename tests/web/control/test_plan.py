"""The web's re-plan preview agrees with the trainer's own Schedule (the web may not import the trainer; the test
may), and the preview endpoint answers with the new plan and ETA."""

from __future__ import annotations

import json
import math

import pytest

from observatory import contract
from training.config import TrainSection
from training.schedule import Schedule
from webapp.control import plan

from .conftest import RUN


@pytest.mark.parametrize("kind,warmup,at,new_tokens", [
    ("linear", 0.1, 50, 3_000_000), ("linear", 0.0, 400, 500_000), ("wsd", 0.05, 10, 2_000_000),
    ("wsd", 0.05, 700, 1_500_000), ("linear", 0.3, 100, 4_000_000),
])
def test_the_preview_is_the_trainers_own_replan(kind, warmup, at, new_tokens):
    train = {"lr": 0.01, "token_budget": 1_000_000, "warmup_ratio": warmup, "min_lr_ratio": 0.1, "schedule": kind,
             "decay_ratio": 0.2, "batch_size": 4}
    tps = 4 * 32
    sched = Schedule(TrainSection(**{k: v for k, v in train.items()}), math.ceil(train["token_budget"] / tps))
    first = plan.initial(train, tps)
    assert first["knots"] == [tuple(k) for k in sched.knots] and first["total_steps"] == sched.total_steps
    sched.replan(at, max(at + 1, math.ceil(new_tokens / tps)))
    new = plan.replan(train, json.loads(json.dumps(first)), at, new_tokens, tps)  # knots arrive as JSON lists
    assert [k[0] for k in new["knots"]] == [k[0] for k in sched.knots] and new["total_steps"] == sched.total_steps
    assert [k[1] for k in new["knots"]] == pytest.approx([k[1] for k in sched.knots], rel=1e-12)
    for step in (0, at - 1, at, at + 7, new["total_steps"] - 1, new["total_steps"] + 5):
        assert plan.ratio_at(new["knots"], step) == pytest.approx(sched.ratio(step), rel=1e-12)


@pytest.mark.django_db
def test_the_preview_endpoint_shows_the_new_plan_and_eta(operator, run, redis_client):
    redis_client.set(contract.heartbeat_key(RUN), json.dumps({"t": 1.0, "phase": "training", "step": 100,
                                                               "tokens": 12_800, "token_budget": 1_000_000,
                                                               "eta_s": 100.0, "steps_per_s": 10.0}))
    body = operator.get(f"/api/runs/{RUN}/plan/?tokens=2000000").json()
    assert body["old"]["total_steps"] == 7813 and body["new"]["total_steps"] == 15625
    assert body["new"]["eta_s"] == pytest.approx((15625 - 100) / 10.0)
    assert body["curve_new"][-1][0] == 15625 and body["curve_new"][-1][1] == pytest.approx(0.01 * 0.1)
    resp = operator.get(f"/api/runs/{RUN}/plan/?tokens=1000")
    assert resp.status_code == 400 and "must exceed tokens seen" in resp.json()["error"]
    assert operator.get(f"/api/runs/{RUN}/plan/").status_code == 400
