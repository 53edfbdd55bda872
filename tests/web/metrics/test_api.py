"""The public JSON API for series: a run's metrics, windows (every spike kept), 404/400 errors."""

import math
import random
import time

import pytest
from django.db import transaction

from observatory import contract
from webapp.metrics import storage
from webapp.metrics.models import Series
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db


@pytest.fixture
def run():
    run = Run.objects.create(id="r1", name="demo run", state="training", last_step=9)
    s = Series.objects.create(run=run, name=contract.M_LOSS)
    with transaction.atomic():
        storage.bulk_load(s.id, [(i, math.nan if i == 4 else 10.0 - i) for i in range(10)])
    return run


def test_api_lists_a_runs_metrics(client, run):
    body = client.get("/api/runs/r1/metrics/").json()
    assert body["metrics"] == [{"name": contract.M_LOSS, "count": 10, "first_step": 0, "last_step": 9}]


def test_api_returns_raw_points_with_nonfinite_as_null_and_listed(client, run):
    body = client.get(f"/api/runs/r1/metrics/{contract.M_LOSS}/").json()
    assert body["steps"] == list(range(10))
    assert body["values"][4] is None and body["values"][3] == 7.0
    assert body["nonfinite"] == [[4, "NaN"]]
    assert body["nonfinite_counts"] == {"NaN": 1, "Infinity": 0, "-Infinity": 0}
    assert body["exact"] is True and body["level"] == -1


def test_api_window_honours_start_and_end(client, run):
    body = client.get(f"/api/runs/r1/metrics/{contract.M_LOSS}/?start=2&end=5").json()
    assert body["steps"] == [2, 3, 4, 5] and (body["start"], body["end"]) == (2, 5)


@pytest.mark.parametrize("url", ["/api/runs/nope/", "/api/runs/nope/metrics/", "/api/runs/nope/metrics/train/loss/",
                                 "/api/runs/r1/metrics/no/such/metric/"])
def test_api_answers_unknown_runs_and_metrics_with_json_404(client, run, url):
    resp = client.get(url)
    assert resp.status_code == 404
    assert "not found" in resp.json()["error"]


@pytest.mark.parametrize("query,param", [("points=abc", "points"), ("points=5", "points"),
                                         ("points=20001", "points"), ("start=-1", "start"), ("end=x", "end"),
                                         ("start=9&end=3", "end")])
def test_api_rejects_bad_parameters_with_400_naming_them(client, run, query, param):
    resp = client.get(f"/api/runs/r1/metrics/{contract.M_LOSS}/?{query}")
    assert resp.status_code == 400
    assert resp.json()["parameter"] == param and param in resp.json()["error"]


def test_a_million_point_series_keeps_all_five_spikes_at_1000_points(client, run):
    n, spikes = 1_000_000, [111_111, 400_000, 555_555, 777_777, 999_999]
    rnd = random.Random(3)
    s = Series.objects.create(run=run, name="big/loss")

    def value(i):
        # a smaller spike 700 steps after a big one shares its bucket at full range; zooming must reveal it
        return 50.0 if i in spikes else 30.0 if i == 400_700 else 2.0 + rnd.random() * 0.1

    with transaction.atomic():
        storage.bulk_load(s.id, ((i, value(i)) for i in range(n)))
    timings = []
    for _ in range(3):
        t = time.perf_counter()
        body = client.get("/api/runs/r1/metrics/big/loss/?points=1000").json()
        timings.append(time.perf_counter() - t)
    assert len(body["steps"]) <= 1000
    assert [st for st, v in zip(body["steps"], body["values"]) if v == 50.0] == spikes
    assert body["count"] == n and body["level"] >= 0
    print(f"full-range 1M-point query via the API: best {min(timings) * 1000:.1f} ms")
    zoom = client.get("/api/runs/r1/metrics/big/loss/?start=400500&end=400900&points=1000").json()
    assert zoom["exact"] and len(zoom["steps"]) == 401 and 400_700 in zoom["steps"]
    mid = client.get("/api/runs/r1/metrics/big/loss/?start=390000&end=410000&points=500").json()
    assert [st for st, v in zip(mid["steps"], mid["values"]) if v > 10] == [400_000, 400_700]
