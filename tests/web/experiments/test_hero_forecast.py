"""The hero's own forecast, shown and watched (issue 48): the registration the MoE ladder of the hero's family makes
(training.ladder.register on training/configs/ladder_moe.toml, its target's config and budget), published by the
target run through the real stream and ingest, is the band the front page and the run page carry over the live
loss; driving the live loss out of that band raises a `forecast_deviation` in the run's anomaly log.

The rungs' losses here are a smooth power law of their planned compute (the fit needs numbers; the real ladder's
are measured by bench/scaling.py --demo); everything else is the ladder's and the site's own code."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from observatory import contract
from training import ladder as lad
from training.config import load
from webapp.anomalies.models import Anomaly

from ..conftest import Trainer
from . import records

pytestmark = pytest.mark.django_db(transaction=True)
LADDER = Path(__file__).resolve().parents[3] / "training" / "configs" / "ladder_moe.toml"


def page_data(html: str) -> dict:
    return json.loads(re.search(r'<script id="page-data" type="application/json">(.*?)</script>', html, re.S)[1])


@pytest.fixture(scope="module")
def moe():
    """(registration, target config) of the MoE ladder, its target renamed to the test's run id."""
    ladder = lad.load_ladder(LADDER)
    ladder.bootstrap = 40  # the band's bootstrap part; the calibrated rule's own refits are as in the ladder
    state = {"rungs": {}}
    for i, r in enumerate(ladder.rungs):
        loss = (1.0 + 200.0 * r.C ** -0.2) * (1 + 0.003 * (-1) ** i)
        state["rungs"][r.run_id] = {"N": r.N, "tokens": r.D, "C": r.C, "loss": loss}
    return ladder, state, load(ladder.target)


def registration(moe, run_id: str) -> dict:
    ladder, state, _ = moe
    ladder.target_run_id = run_id
    return lad.register(ladder, state, now=records.STARTED - 3600)


def curve_at(reg: dict, tokens: float) -> float:
    c = reg["forecast"]["curve"]
    return float(np.interp(np.log(max(tokens, c["tokens"][0])), np.log(c["tokens"]), c["loss"]))


def train(t: Trainer, reg: dict, cfg, steps, shape) -> None:
    """train/loss every 8th step and eval/loss at the config's cadence: forecast(tokens) · shape(tokens / D)."""
    tps, D = cfg.train.batch_size * cfg.model.seq_len, cfg.train.token_budget
    for s in steps:
        tokens = s * tps
        values = {contract.M_TOTAL_TOKENS: float(tokens)}
        if s % 8 == 0:
            values[contract.M_LOSS] = curve_at(reg, tokens) * shape(tokens / D) * 1.02
        if s % cfg.train.eval_every == 0:
            values[contract.M_EVAL_LOSS] = curve_at(reg, tokens) * shape(tokens / D)
        if len(values) > 1:
            t.metrics_named(s, values)


def healthy(f):  # above the final-loss envelope while the learning rate decays, meeting it at D
    return 1 + 0.03 * (1 - f)


def test_the_hero_carries_the_moe_ladders_band_and_leaving_it_is_an_anomaly(client, redis_client, live_ingest,
                                                                             run_id, moe):
    _, _, cfg = moe
    reg = registration(moe, run_id)
    assert reg["experiment"]["name"] == "demo-moe-scaling" and reg["target"]["run_id"] == run_id
    tps, steps = cfg.train.batch_size * cfg.model.seq_len, cfg.train.token_budget // (cfg.train.batch_size *
                                                                                      cfg.model.seq_len)
    t = Trainer(redis_client, run_id)
    t.send("run", name="hero", config=cfg.to_dict(), started_at=records.STARTED)
    t.send("state", state="training", step=0, detail="")
    t.send("event", step=0, name="forecast", payload=reg)
    half = steps * 6 // 10
    train(t, reg, cfg, range(1, half + 1), healthy)
    live_ingest.drain()

    # the front page features the hero with the MoE ladder's band over its steps
    front = page_data(client.get("/").content.decode())
    assert front["run_id"] == run_id
    band = front["chart"]["band"]
    curve = reg["forecast"]["curve"]
    assert band["sha256"] == reg["sha256"] and band["high"] == curve["high"] and band["low"] == curve["low"]
    assert band["steps"][-1] == pytest.approx(cfg.train.token_budget / tps)
    assert band["experiment_url"] == "/experiments/demo-moe-scaling/"
    # the run page carries the same band for first paint, and its forecast API says it verifies
    run_page = page_data(client.get(f"/runs/{run_id}/").content.decode())
    assert run_page["forecast"] is True and run_page["forecast_band"] == band
    api = client.get(f"/api/runs/{run_id}/forecast/").json()
    assert api["verified"] is True and api["registration"]["sha256"] == reg["sha256"]
    # tracking the forecast past half the budget: nothing raised
    assert not Anomaly.objects.filter(run_id=run_id, kind="forecast_deviation").exists()

    # the live loss leaves the band (above its widened upper edge) and stays out
    train(t, reg, cfg, range(half + 1, steps + 1), lambda f: 1.25)
    live_ingest.drain()
    got = list(Anomaly.objects.filter(run_id=run_id, kind="forecast_deviation"))
    assert len(got) == 1, got
    a = got[0]
    assert a.metric == contract.M_EVAL_LOSS and a.start_step > half and a.severity in ("warning", "critical")
    assert "above the pre-registered band" in a.explanation
    log = client.get(f"/runs/{run_id}/anomalies/").content.decode()
    assert "forecast deviation" in log.replace("_", " ") and f"anomaly={a.id}" in log  # a row, linked to its chart
    listed = client.get(f"/api/runs/{run_id}/anomalies/", {"kind": "forecast_deviation"}).json()
    assert [x["start_step"] for x in listed["anomalies"]] == [a.start_step]
    pushed = [x for _, body in live_ingest.pushed if body.get("type") == "anomaly" for x in body["anomalies"]]
    assert any(x["kind"] == "forecast_deviation" and x["event"] == "opened" for x in pushed)
