"""forecast_deviation inside ingest: a verified forecast arms the run's Monitor (in the same batch, or from the
database after a restart); a healthy run raises nothing, a drifting one exactly one anomaly; an unverified forecast
arms nothing."""

from __future__ import annotations

import pytest

from webapp.anomalies.detect import DETECTION
from webapp.anomalies.models import Anomaly, DetectorState

from ..conftest import Trainer
from . import records

pytestmark = pytest.mark.django_db(transaction=True)
STEPS = range(1, 401)  # 1e7 tokens a step: the target's D at step 400


def healthy(f):  # above the final-loss envelope while the learning rate decays, meeting it at D
    return 1 + 0.04 * (1 - f)


def drifting(f):
    return healthy(f) + max(0.0, f - 0.5) * 0.2


def kinds(run_id):
    return list(Anomaly.objects.filter(run_id=run_id, kind="forecast_deviation").values_list("key", "metric"))


def test_a_run_that_follows_the_forecast_raises_nothing(redis_client, live_ingest, run_id):
    reg = records.registration(run_id)
    t = Trainer(redis_client, run_id)
    records.publish(t, reg)
    records.metrics(t, reg, STEPS, healthy)
    live_ingest.drain()
    assert kinds(run_id) == []
    assert DetectorState.objects.get(run_id=run_id).snapshot["forecast"]["band"]["sha"] == reg["sha256"]


def test_a_drifting_run_raises_exactly_one_even_across_an_ingest_restart(redis_client, live_ingest, run_id):
    reg = records.registration(run_id)
    t = Trainer(redis_client, run_id)
    records.publish(t, reg)
    live_ingest.drain()  # the forecast alone in a batch
    DETECTION.cache.clear()  # a new ingest process: the Monitor comes back from the database
    records.metrics(t, reg, STEPS, drifting)
    live_ingest.drain()
    got = kinds(run_id)
    assert len(got) == 1 and got[0][1] == "train/loss"
    a = Anomaly.objects.get(run_id=run_id, kind="forecast_deviation")
    assert a.start_step >= 200 and "above the pre-registered band" in a.explanation
    pushed = [x for _, body in live_ingest.pushed if body.get("type") == "anomaly" for x in body["anomalies"]]
    assert any(x["kind"] == "forecast_deviation" and x["event"] == "opened" for x in pushed)


def test_an_unverified_forecast_arms_nothing(redis_client, live_ingest, run_id):
    reg = records.registration(run_id)
    reg["forecast"]["hero"]["loss"] = 1.0  # edited: the forecast's own hash fails
    t = Trainer(redis_client, run_id)
    records.publish(t, reg)
    records.metrics(t, reg, STEPS, drifting)
    live_ingest.drain()
    assert kinds(run_id) == []
    assert DetectorState.objects.get(run_id=run_id).snapshot["forecast"]["band"] is None
