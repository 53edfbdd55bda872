"""Was the forecast right? The experiment pages hold the target's actual final loss to the frozen forecast once it
finished (inside/outside the band, error %), draw the ladder's fit with the target's point, and name the hash check
for what it is (registration intact), through the real stream and ingest."""

from __future__ import annotations

import re

import pytest

from observatory import contract

from ..conftest import Trainer
from . import records

pytestmark = pytest.mark.django_db(transaction=True)


def target(redis_client, live_ingest, run_id, final: float | None, *, end_step: int = 400, stop: bool = True):
    """The target run: forecast, train/loss along it to `end_step`, eval/loss `final` at the end, then stopped."""
    reg = records.registration(run_id)
    t = Trainer(redis_client, run_id)
    records.publish(t, reg)
    records.metrics(t, reg, range(0, end_step + 1, 20))
    if final is not None:
        t.metrics_named(end_step, {contract.M_EVAL_LOSS: final})
    if stop:
        t.send("state", state="stopped", step=end_step, detail="token budget reached")
    live_ingest.drain()
    return reg


def hero(reg):
    return reg["forecast"]["hero"]


def test_a_finished_target_inside_its_band_gets_the_verdict_and_the_error(client, redis_client, live_ingest, run_id):
    reg = target(redis_client, live_ingest, run_id, None)
    h = hero(reg)
    final = (h["loss"] + h["high"]) / 2  # inside, above the forecast
    Trainer(redis_client, run_id).metrics_named(400, {contract.M_EVAL_LOSS: final})
    live_ingest.drain()
    page = client.get("/experiments/ladder-demo/").content.decode()
    verdict = re.search(r'data-testid="verdict">(.*?)</p>', page, re.S)[1]
    assert "inside the band" in verdict and f"{final:.5g}" in verdict
    assert f"{100 * (final - h['loss']) / h['loss']:+.2f}%" in verdict
    assert "eval/loss at step 400" in page
    assert 'data-testid="actual-point"' in page  # the target's point on the ladder's chart
    assert "inside the band" in client.get("/experiments/").content.decode()


def test_a_finished_target_above_its_band_is_outside(client, redis_client, live_ingest, run_id):
    reg = target(redis_client, live_ingest, run_id, None)
    final = hero(reg)["high"] * 1.05
    Trainer(redis_client, run_id).metrics_named(400, {contract.M_EVAL_LOSS: final})
    live_ingest.drain()
    page = client.get("/experiments/ladder-demo/").content.decode()
    verdict = re.search(r'data-testid="verdict">(.*?)</p>', page, re.S)[1]
    assert "above the band" in verdict and "verdict-outside" in verdict and "inside" not in verdict


def test_a_training_target_has_no_verdict_yet(client, redis_client, live_ingest, run_id):
    target(redis_client, live_ingest, run_id, None, end_step=200, stop=False)
    page = client.get("/experiments/ladder-demo/").content.decode()
    verdict = re.search(r'data-testid="verdict">(.*?)</p>', page, re.S)[1]
    assert "Not yet" in verdict and "50%" in verdict and "band" not in verdict
    assert 'data-testid="actual-point"' not in page
    assert "training, 50% of its tokens" in client.get("/experiments/").content.decode()


def test_a_target_stopped_short_of_its_budget_gets_no_verdict(client, redis_client, live_ingest, run_id):
    target(redis_client, live_ingest, run_id, 3.0, end_step=100)
    page = client.get("/experiments/ladder-demo/").content.decode()
    verdict = re.search(r'data-testid="verdict">(.*?)</p>', page, re.S)[1]
    assert "stopped at 25%" in verdict and "no verdict" in verdict


def test_the_ladder_chart_draws_every_rung_the_fit_and_the_band(client, redis_client, live_ingest, run_id):
    reg = target(redis_client, live_ingest, run_id, None, stop=False)
    page = client.get("/experiments/ladder-demo/").content.decode()
    svg = re.search(r'<svg class="ladder-chart".*?</svg>', page, re.S)[0]
    assert svg.count('data-testid="rung"') == len(reg["forecast"]["rungs"]["C"]) == 5
    assert 'data-testid="fit-line"' in svg and 'data-testid="band"' in svg and 'data-testid="forecast-point"' in svg
    # the fitted line passes through the rungs' neighbourhood: its path has as many points as asked, all finite
    d = re.search(r'data-testid="fit-line" d="([^"]+)"', svg)[1]
    assert len(re.findall(r"[ML]", d)) == 48 and "nan" not in d.lower() and "inf" not in d.lower()


def test_the_hash_check_reads_registration_intact_not_verified(client, redis_client, live_ingest, run_id):
    target(redis_client, live_ingest, run_id, None, stop=False)
    detail = client.get("/experiments/ladder-demo/").content.decode()
    listing = client.get("/experiments/").content.decode()
    assert ">registration intact</span>" in detail and ">intact</span>" in listing
    assert ">verified<" not in detail and ">verified<" not in listing  # it reads like "came true": it is not that
