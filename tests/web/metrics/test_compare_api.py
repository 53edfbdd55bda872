"""Compare runs, server side: GET /api/compare/?runs=a,b (each run's series and x axes, in the order asked) with
its 400/404 answers, and the /compare/ page (public, scripts only from static files)."""

import datetime as dt
import re

import pytest
from django.db import transaction

from observatory import contract
from webapp.metrics import storage
from webapp.metrics.models import Series
from webapp.runs.compare import MAX_RUNS
from webapp.runs.models import Run, RunEvent

pytestmark = pytest.mark.django_db
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def series(run, name, points):
    s = Series.objects.create(run=run, name=name)
    with transaction.atomic():
        storage.bulk_load(s.id, points)


@pytest.fixture
def runs():
    a = Run.objects.create(id="rung-a", name="ladder", state="stopped", started_at=T0)
    b = Run.objects.create(id="base-b", name="baseline", state="stopped", source="wandb")
    series(a, contract.M_LOSS, [(i, 4.0 - 0.1 * i) for i in range(10)])
    series(a, contract.M_TOTAL_TOKENS, [(i, 1024.0 * (i + 1)) for i in range(10)])
    series(b, contract.M_LOSS, [(i, 3.0) for i in range(5)])
    series(b, "eval/loss", [(4, 3.1)])
    for step, sec in ((0, 5), (5, 15), (9, 23)):
        RunEvent.objects.create(run=a, kind="event", name="checkpoint_saved", step=step,
                                t=T0 + dt.timedelta(seconds=sec), entry_id=f"{step}-0")
    return a, b


def test_each_run_comes_with_its_series_and_x_axes_in_the_order_asked(client, runs):
    body = client.get("/api/compare/?runs=base-b,rung-a").json()
    assert [r["id"] for r in body["runs"]] == ["base-b", "rung-a"]
    b, a = body["runs"]
    assert [m["name"] for m in b["metrics"]] == ["eval/loss", contract.M_LOSS]
    assert b["source"] == "wandb" and b["state"] == "stopped" and b["name"] == "baseline"
    assert {"name": contract.M_LOSS, "count": 10, "first_step": 0, "last_step": 9} in a["metrics"]
    assert a["time_anchors"] == [[0, T0.timestamp() + 5], [5, T0.timestamp() + 15], [9, T0.timestamp() + 23]]
    assert a["started"] == T0.isoformat() and b["time_anchors"] == []
    assert body["tokens_metric"] == contract.M_TOTAL_TOKENS


def test_runs_may_be_repeated_parameters_as_the_run_lists_form_sends_them(client, runs):
    body = client.get("/api/compare/?runs=rung-a&runs=base-b&runs=rung-a").json()
    assert [r["id"] for r in body["runs"]] == ["rung-a", "base-b"]


@pytest.mark.parametrize("query", ["", "runs=", "runs=,", "runs=bad%20id", "runs=rung-a,../x",
                                   "runs=" + ",".join(f"r{i}" for i in range(MAX_RUNS + 1))])
def test_bad_run_lists_are_a_400_naming_the_parameter(client, runs, query):
    resp = client.get("/api/compare/?" + query)
    assert resp.status_code == 400
    assert resp.json()["parameter"] == "runs" and "runs" in resp.json()["error"]


def test_unknown_runs_are_a_404_listing_them(client, runs):
    resp = client.get("/api/compare/?runs=rung-a,nope,gone")
    assert resp.status_code == 404
    assert resp.json()["missing"] == ["nope", "gone"] and "nope" in resp.json()["error"]


def test_the_compare_api_is_read_only(client, runs):
    assert client.post("/api/compare/?runs=rung-a").status_code == 405


def test_the_page_is_public_with_no_inline_script(client, runs):
    resp = client.get("/compare/?runs=rung-a,nope")  # the page never fails on its query: the script says why
    assert resp.status_code == 200
    html = resp.content.decode()
    assert "/static/js/compare.js" in html and "/static/vendor/plotly-cartesian.min.js" in html
    scripts = re.findall(r"<script([^>]*)>(.*?)</script>", html, re.S)
    assert all("src=" in attrs or 'type="application/json"' in attrs for attrs, _ in scripts)
    assert "https://" not in html and "http://" not in html


def test_the_run_list_and_the_dashboard_link_to_it(client, runs):
    html = client.get("/runs/").content.decode()
    assert 'action="/compare/"' in html and 'name="runs" value="rung-a" form="compare-form"' in html
    assert 'href="/compare/?runs=rung-a"' in client.get("/runs/rung-a/").content.decode()
