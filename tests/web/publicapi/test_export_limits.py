"""Exports are bounded per request (at most MAX_POINTS points; the answer says where the rest starts) and
rate-limited per user or address (429)."""

from __future__ import annotations

import csv
import io
import json

import pytest
from django.core.cache import cache
from django.db import transaction

from webapp.metrics import storage
from webapp.metrics.models import Series
from webapp.publicapi import views
from webapp.transfer import exports
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db
RUN = "bounded-run"


@pytest.fixture(autouse=True)
def _fresh_rate_limits():
    cache.clear()  # rate-limit counters live in this process's memory under tests
    yield
    cache.clear()


@pytest.fixture
def run():
    run = Run.objects.create(id=RUN, name="bounded", state="stopped", last_step=2_999)
    dense = Series.objects.create(run=run, name="train/loss")
    sparse = Series.objects.create(run=run, name="eval/loss")
    with transaction.atomic():
        storage.bulk_load(dense.id, [(i, float(i)) for i in range(3_000)])
        storage.bulk_load(sparse.id, [(i, -float(i)) for i in range(0, 3_000, 100)])  # 30 points
    return run


def _csv_rows(resp) -> list[tuple[str, int, float]]:
    reader = csv.reader(io.StringIO(b"".join(resp.streaming_content).decode()))
    assert next(reader) == ["series", "step", "value"]
    return [(s, int(step), float(v)) for s, step, v in reader]


def test_a_full_export_longer_than_the_bound_comes_in_pages_that_add_up_to_the_whole(client, run, monkeypatch):
    monkeypatch.setattr(exports, "MAX_POINTS", 1_000)
    url, rows, pages = f"/api/v1/runs/{RUN}/export.csv", [], 0
    while url:
        resp = client.get(url)
        assert resp.status_code == 200 and resp["Export-Max-Points"] == "1000"
        page = _csv_rows(resp)
        assert 0 < len(page) <= 1_000
        rows += page
        pages += 1
        url = resp.get("Link", "").partition(">")[0].lstrip("<") or None
        if url:
            assert resp["Link"].endswith('rel="next"') and f"start={resp['Export-Next-Start']}" in url
    assert pages == 4  # 3,030 points at most 1,000 a page (the sparse series' 30 cost one step each at most)
    assert sorted(rows) == sorted([("train/loss", i, float(i)) for i in range(3_000)]
                                  + [("eval/loss", i, -float(i)) for i in range(0, 3_000, 100)])


def test_json_says_where_the_rest_starts_and_a_short_range_is_not_cut(client, run, monkeypatch):
    monkeypatch.setattr(exports, "MAX_POINTS", 1_000)
    body = json.loads(b"".join(client.get(f"/api/v1/runs/{RUN}/export.json").streaming_content))
    assert body["next"].endswith(f"start={body['end'] + 1}") and body["start"] == 0
    assert sum(len(s["points"]) for s in body["series"]) <= 1_000
    resp = client.get(f"/api/v1/runs/{RUN}/export.json?start=100&end=500")
    body = json.loads(b"".join(resp.streaming_content))
    assert body["next"] is None and "Link" not in resp and body["end"] == 500


def test_a_downsampled_export_over_the_bound_is_a_clear_400(client, run, monkeypatch):
    monkeypatch.setattr(exports, "MAX_POINTS", 1_000)
    resp = client.get(f"/api/v1/runs/{RUN}/export.csv?points=600")  # 2 series x 600
    assert resp.status_code == 400 and "fewer series" in resp.json()["error"]
    assert client.get(f"/api/v1/runs/{RUN}/export.csv?points=500").status_code == 200


def test_exports_are_rate_limited_per_address(client, run):
    limit = int(views.EXPORT_RATE.split("/")[0])
    paths = [f"/api/v1/runs/{RUN}/export.{f}?end=10" for f in ("csv", "json", "parquet")] + [
        f"/api/v1/runs/{RUN}/records.json"]
    for i in range(limit):
        assert client.get(paths[i % len(paths)]).status_code == 200, i
    refused = client.get(paths[0])
    assert refused.status_code == 429 and refused.json()["code"] == "rate_limited"
    assert client.get(paths[0], REMOTE_ADDR="10.9.8.7").status_code == 200  # another address has its own budget
