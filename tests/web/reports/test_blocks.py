"""The forecast and comparison blocks: a run's pre-registered forecast (verified or not) with its live loss, and
several runs' series in one chart."""

from __future__ import annotations

import json
import re

from webapp.metrics.models import Series
from webapp.reports import blocks
from webapp.runs.models import Run, RunEvent

from ..experiments import records
from .conftest import RUN


def _page_data(html: str) -> dict:
    return json.loads(re.search(r'<script id="page-data" type="application/json">(.*?)</script>', html, re.S).group(1))


def test_a_forecast_block_shows_the_registration_and_the_runs_live_loss(world, personas):
    reg = records.registration(RUN)
    RunEvent.objects.create(run_id=RUN, kind="event", name="forecast", step=0, entry_id="1-0", payload=reg)
    Run.objects.create(id="no-forecast")
    body = f"{{{{forecast run={RUN}}}}}\n{{{{forecast run=no-forecast}}}}"
    resp = personas["member"].post("/reports/new/", {"title": "forecast", "body": body, "action": "publish"})
    assert resp.status_code == 302
    page = personas["anonymous"].get(resp["Location"]).content.decode()
    assert "ladder-demo" in page and "verified forecast" in page and "The compute law extrapolates" in page
    assert "no-forecast has published no forecast" in page
    assert [c["series"] for c in _page_data(page)["charts"]] == ["train/loss", "train/loss"]


def test_a_compare_block_charts_one_series_of_several_runs(world, personas):
    other = Run.objects.create(id="rep-other", last_step=10)
    Series.objects.create(run=other, name="train/loss")
    parts = blocks.parse(f"{{{{compare runs={RUN},rep-other series=train/loss steps=0..400}}}}")
    assert parts == [{"kind": "compare", "runs": [RUN, "rep-other"], "series": "train/loss", "start": 0, "end": 400}]
    assert blocks.cited_runs(parts) == {RUN, "rep-other"}
    resp = personas["member"].post("/reports/new/", {"title": "c", "body": f"{{{{compare runs={RUN},rep-other "
                                                     "series=train/loss}}", "action": "publish"})
    page = personas["anonymous"].get(resp["Location"]).content.decode()
    data = _page_data(page)
    assert data["charts"] == [{"runs": [RUN, "rep-other"], "series": "train/loss", "start": None, "end": None}]
    assert set(data["last_events"]) == {RUN, "rep-other"}
    assert "/compare/?runs=rep-run%2Crep-other" in page
    # a cited run deleted since: the block says so instead of failing the page
    other.delete()
    page = personas["anonymous"].get(resp["Location"])
    assert page.status_code == 200 and "[compare no longer available]" in page.content.decode()
