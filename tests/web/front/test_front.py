"""The front page (`/`): the featured run with its loss and forecast band, the latest moments across runs each
linking to its chart window, experiments; the same as JSON at /api/front/. The run table is at /runs/."""

from __future__ import annotations

import json
import re
from urllib.parse import parse_qs, urlsplit

import pytest
from django.contrib.auth import get_user_model

from observatory import contract
from webapp.annotations.models import Annotation, Reply
from webapp.anomalies.models import Anomaly
from webapp.runs import moments
from webapp.runs.models import Run

from ..experiments import records


def page_data(html: str) -> dict:
    return json.loads(re.search(r'<script id="page-data" type="application/json">(.*?)</script>', html, re.S)[1])


@pytest.fixture
def hero(db, trainer, ingestor, run_id):
    reg = records.registration(run_id)
    records.publish(trainer, reg)
    records.metrics(trainer, reg, range(0, 60))
    trainer.send("heartbeat", step=59, phase="training", tokens=59 * records.TPS, token_budget=records.D,
                 eta_s=120.0, steps_per_s=2.0)
    ingestor.drain()
    Run.objects.create(id="old-run", name="finished long ago", state="stopped")
    return Run.objects.get(pk=run_id)


def test_the_front_page_features_the_live_run_with_its_loss_and_forecast_band(client, hero):
    html = client.get("/").content.decode()
    data = page_data(html)
    assert data["run_id"] == hero.id and data["featured"]["state"] == "training"
    win = data["chart"]["window"]
    assert win["metric"] == contract.M_LOSS and win["last_step"] == 59 and len(win["steps"]) == 60
    band = data["chart"]["band"]
    assert band and len(band["steps"]) == len(band["low"]) == len(band["high"]) and band["steps"][0] >= 0
    assert all(lo <= hi for lo, hi in zip(band["low"], band["high"]))
    assert "ladder-demo" in html  # the experiment and its forecast
    assert 'href="/runs/"' in html  # the run table, one click away


def test_the_band_goes_on_the_held_out_loss_once_the_run_has_a_few_evaluations(client, hero, trainer, ingestor):
    # issue 43: the band was drawn on the noisy training loss even where the run had a clear held-out loss
    for s in range(0, 60, 10):
        trainer.metrics_named(s, {contract.M_EVAL_LOSS: 4.0 - s / 100})
    ingestor.drain()
    html = client.get("/").content.decode()
    data = page_data(html)
    assert data["chart"]["metric"] == contract.M_EVAL_LOSS and data["chart"]["band"]
    assert data["chart"]["window"]["metric"] == contract.M_EVAL_LOSS and len(data["chart"]["window"]["steps"]) == 6
    assert "held-out loss (eval/loss), live" in html


def test_moments_across_runs_link_to_the_chart_at_their_step(client, hero):
    other = Run.objects.create(id="other-run", name="other")
    Anomaly.objects.create(run=hero, key="loss_spike train/loss 30", kind="loss_spike", metric=contract.M_LOSS,
                           start_step=30, peak_step=31, end_step=33, detected_step=31, severity="warning",
                           score=3.0, explanation="loss 9 at step 31 is 3x its running level")
    author = get_user_model().objects.create_user("ann", "ann@example.org", "x" * 12)
    note = Annotation.objects.create(run=other, author=author, title="why the <b>spike</b>?", body="router bias",
                                     body_html="<p>router bias</p>", step_start=500, step_end=510)
    for i in range(2):
        Reply.objects.create(annotation=note, author=author, body=f"r{i}", body_html=f"<p>r{i}</p>")
    Reply.objects.create(annotation=note, author=author, body="spam", body_html="<p>spam</p>", hidden=True)
    Annotation.objects.create(run=other, author=author, title="hidden note", body="x", body_html="<p>x</p>",
                              step_start=1, step_end=1, hidden=True)

    got = {m["kind"]: m for m in client.get("/api/front/").json()["moments"]}
    assert set(got) == {"anomaly", "annotation"}
    a, n = got["anomaly"], got["annotation"]
    assert a["run_id"] == hero.id and a["step"] == 31 and "3x" in a["detail"]
    q = parse_qs(urlsplit(a["url"]).query)
    assert urlsplit(a["url"]).path == f"/runs/{hero.id}/" and int(q["from"][0]) <= 30 and int(q["to"][0]) >= 33
    assert n["count"] == 2 and n["run_id"] == "other-run"  # hidden replies are not counted
    q = parse_qs(urlsplit(n["url"]).query)
    assert q["annotation"] == [str(note.pk)] and int(q["from"][0]) <= 500 <= 510 <= int(q["to"][0])
    html = client.get("/").content.decode()
    assert "why the &lt;b&gt;spike&lt;/b&gt;?" in html and "<b>spike</b>" not in html  # user text is text
    assert "hidden note" not in html


def test_a_failing_moment_source_leaves_the_others(client, hero, monkeypatch):
    def broken(limit):
        raise RuntimeError("/srv/secret/path exploded")

    monkeypatch.setattr(moments, "MOMENT_SOURCES", [broken, *moments.MOMENT_SOURCES])
    resp = client.get("/")
    assert resp.status_code == 200 and "/srv/secret" not in resp.content.decode()


def test_a_later_app_registers_its_own_moments(client, hero, monkeypatch):
    def reports(limit):
        return [{"kind": "report", "id": "1", "run_id": hero.id, "run_name": "h", "step": 5, "from": 0, "to": 25,
                 "title": "Our findings", "detail": "", "count": None, "t": "2999-01-01T00:00:00+00:00",
                 "url": f"/runs/{hero.id}/?from=0&to=25"}]

    monkeypatch.setattr(moments, "MOMENT_SOURCES", list(moments.MOMENT_SOURCES))
    moments.register(reports)
    moments.register(reports)  # once
    assert [m["kind"] for m in client.get("/api/front/").json()["moments"]] == ["report"]


def test_with_no_run_the_front_page_says_so(client, db):
    html = client.get("/").content.decode()
    assert "No run yet" in html and page_data(html)["run_id"] is None


def test_the_run_table_is_at_runs(client, hero):
    html = client.get("/runs/").content.decode()
    assert f'data-run="{hero.id}"' in html and 'data-run="old-run"' in html
