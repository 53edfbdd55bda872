"""The forecast event through the real stream and ingest, then read back: the JSON API (verified or not), the
experiment pages (public), 404s, and a forecast registered after its run began."""

from __future__ import annotations

from html import escape

import pytest

from observatory import contract
from webapp.runs import forecast as forecast_lib
from webapp.runs.models import RunEvent

from ..conftest import Trainer
from . import records

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def hero(redis_client, live_ingest, run_id):
    """The target run with a verified forecast, and rung-a (a run with a loss series; rung-b is not on the site)."""
    reg = records.registration(run_id)
    rung = Trainer(redis_client, "rung-a")
    rung.send("run", name="rung a", config=records.CONFIG)
    rung.metrics(1, **{contract.M_LOSS: 5.0})
    records.publish(Trainer(redis_client, run_id), reg)
    live_ingest.drain()
    return reg


def test_ingest_stores_the_event_and_the_api_serves_it_verified(client, hero, run_id):
    ev = RunEvent.objects.get(run_id=run_id, name="forecast")
    assert ev.step == 0 and ev.payload == hero
    body = client.get(f"/api/runs/{run_id}/forecast/").json()
    assert body["verified"] is True and body["problem"] is None
    assert body["registration"] == hero  # exactly as published: anyone can re-hash it
    assert body["registered_before_start"] is True and body["published_step"] == 0
    assert body["tokens_per_step"] == records.TPS
    assert [(r["id"], r["exists"], r["series"]) for r in body["rungs"]] == [
        ("rung-a", True, [contract.M_LOSS]), ("rung-b", False, [])]
    assert body["experiment_url"] == "/experiments/ladder-demo/"


def test_the_experiment_pages_show_the_frozen_forecast(client, hero, run_id):
    page = client.get("/experiments/").content.decode()
    assert "ladder-demo" in page and escape(hero["experiment"]["goal"]) in page and f"/runs/{run_id}/" in page
    page = client.get("/experiments/ladder-demo/").content.decode()
    fc = hero["forecast"]
    for text in (escape(hero["experiment"]["goal"]), escape(hero["experiment"]["hypothesis"]), hero["sha256"],
                 fc["sha256"],
                 fc["formula"], f"before step 0 of <a href=\"/runs/{run_id}/\">{run_id}</a>",
                 f"{fc['hero']['loss']:.5g}", f"{fc['hero']['low']:.5g}", f"{fc['hero']['high']:.5g}",
                 'href="/runs/rung-a/"', "rung-b <span class=\"muted\">(not on this site)", 'data-testid="verified"'):
        assert text in page, text
    for name, value in fc["params"].items():
        assert f"<td>{name}</td><td class=\"num\">{value:.5g}</td>" in page
    assert "unverified" not in page


def test_404s(client, hero):
    assert client.get("/api/runs/no-such-run/forecast/").status_code == 404
    assert client.get("/experiments/no-such-experiment/").status_code == 404


def test_a_run_without_a_forecast_answers_404_json(client, redis_client, live_ingest):
    Trainer(redis_client, "plain-run").send("run", name="plain", config={})
    live_ingest.drain()
    resp = client.get("/api/runs/plain-run/forecast/")
    assert resp.status_code == 404 and "no forecast" in resp.json()["error"]
    page = client.get("/runs/plain-run/").content.decode()
    assert '"forecast": false' in page  # the dashboard's script asks for none


def test_an_edited_record_is_shown_unverified_and_not_trusted(client, redis_client, live_ingest, run_id):
    reg = records.registration(run_id)
    reg["experiment"]["hypothesis"] = "edited after the fact"  # the hash no longer matches
    records.publish(Trainer(redis_client, run_id), reg)
    live_ingest.drain()
    body = client.get(f"/api/runs/{run_id}/forecast/").json()
    assert body["verified"] is False and "hash mismatch" in body["problem"]
    page = client.get("/experiments/ladder-demo/").content.decode()
    assert 'data-testid="unverified"' in page and "Not trusted: " in page and "hash mismatch" in page
    assert ">not intact</span>" in client.get("/experiments/").content.decode()  # the hash check, named for what it is


def test_a_registration_for_another_run_is_unverified(client, redis_client, live_ingest, run_id):
    records.publish(Trainer(redis_client, run_id), records.registration("somebody-else"))
    live_ingest.drain()
    body = client.get(f"/api/runs/{run_id}/forecast/").json()
    assert body["verified"] is False and "somebody-else" in body["problem"]


def test_a_forecast_made_after_the_run_began_is_not_a_pre_registration(client, redis_client, live_ingest, run_id):
    records.publish(Trainer(redis_client, run_id), records.registration(run_id, created_at=records.STARTED + 60))
    live_ingest.drain()
    body = client.get(f"/api/runs/{run_id}/forecast/").json()
    assert body["verified"] is True and body["registered_before_start"] is False
    page = client.get("/experiments/ladder-demo/").content.decode()
    assert "not a pre-registration" in page and "before step 0" not in page


def test_jsonb_integers_read_back_from_large_floats_still_verify(run_id):
    """PostgreSQL's jsonb prints 4.8e17 back as 480000000000000000: the hash must not depend on it."""
    reg = records.registration(run_id)

    def as_jsonb(x):
        if isinstance(x, float) and abs(x) >= 1e16 and x == int(x):
            return int(x)
        if isinstance(x, dict):
            return {k: as_jsonb(v) for k, v in x.items()}
        if isinstance(x, list):
            return [as_jsonb(v) for v in x]
        return x

    mangled = as_jsonb(reg)
    assert mangled["forecast"]["hero"]["C"] == 480000000000000000 and isinstance(mangled["forecast"]["hero"]["C"], int)
    assert forecast_lib.check(mangled, run_id) == (True, None)
    mangled["created_at"] += 1
    assert forecast_lib.check(mangled, run_id)[0] is False
