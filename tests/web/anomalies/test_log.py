"""The anomaly log: the public JSON API and page with their filters, and operators' triage (who, why, when)."""

from __future__ import annotations

import json

import pytest
from django.core.cache import cache
from django.test import Client

from webapp.anomalies.models import Anomaly
from webapp.runs.models import Run

from ..accounts.conftest import make_user

RUN = "log-run"


@pytest.fixture
def log(db):
    cache.clear()  # rate-limit counters
    Run.objects.create(id=RUN, name="log test")

    def add(kind, start, severity="critical", metric="train/loss", **kw):
        return Anomaly.objects.create(run_id=RUN, key=f"{kind} {metric} {start}", kind=kind, metric=metric,
                                      start_step=start, peak_step=start, detected_step=start, severity=severity,
                                      score=2.0, explanation=f"{kind} at step {start}", **kw)

    return {"spike": add("loss_spike", 100, end_step=104), "grad": add("grad_norm_spike", 200, "warning",
                                                                       "grad/norm/total"),
            "info": add("loss_spike", 300, "info"), "old": add("loss_spike", 400, superseded=True)}


@pytest.fixture
def operator(db):
    c = Client()
    c.force_login(make_user("op", "operator"))
    return c


def api(client=None, **params):
    return (client or Client()).get(f"/api/runs/{RUN}/anomalies/", params)


def test_the_api_lists_the_current_timeline_newest_first_with_zoom_windows(log):
    body = api().json()
    assert [a["start_step"] for a in body["anomalies"]] == [300, 200, 100]  # the superseded one is history
    spike = body["anomalies"][2]
    assert spike["end_step"] == 104 and spike["status"] == "open" and spike["zoom"] == {"from": 80, "to": 124}
    assert "acknowledged_by" not in spike  # who triaged: operators only
    assert [a["start_step"] for a in api(superseded=1).json()["anomalies"]] == [400, 300, 200, 100]


@pytest.mark.parametrize("params,steps", [({"kind": "loss_spike"}, [300, 100]), ({"severity": "warning"}, [200]),
                                          ({"status": "open", "severity": "critical"}, [100]),
                                          ({"status": "explained"}, [])])
def test_the_api_filters(log, params, steps):
    assert [a["start_step"] for a in api(**params).json()["anomalies"]] == steps


@pytest.mark.parametrize("params", [{"kind": "Loss Spike"}, {"severity": "fatal"}, {"status": "closed"},
                                    {"limit": "0"}, {"limit": "x"}, {"superseded": "maybe"}])
def test_bad_filters_are_a_clear_400(log, params):
    resp = api(**params)
    assert resp.status_code == 400 and list(params)[0] in resp.json()["error"]
    page = Client().get(f"/runs/{RUN}/anomalies/", params)
    assert page.status_code == 400 and list(params)[0] in page.content.decode()


def test_unknown_runs_are_404(db):
    assert Client().get("/api/runs/nope/anomalies/").status_code == 404
    assert Client().get("/runs/nope/anomalies/").status_code == 404


def test_the_page_lists_filters_and_links_to_the_chart_zoomed_on_each(log):
    html = Client().get(f"/runs/{RUN}/anomalies/", {"kind": "loss_spike"}).content.decode()
    assert f'id="a-{log["spike"].id}"' in html and f'id="a-{log["grad"].id}"' not in html
    assert f"/runs/{RUN}/?from=80&amp;to=124&amp;anomaly={log['spike'].id}" in html
    assert "<form method=\"post\"" not in html  # no triage for visitors
    dash = Client().get(f"/runs/{RUN}/").content.decode()
    assert f'href="/runs/{RUN}/anomalies/"' in dash and "/static/js/dashboard-bundle.js" in dash
    served = b"".join(Client().get("/static/js/dashboard-bundle.js").streaming_content).decode()
    assert "// js/anomalies.js\n" in served  # the page's scripts come in one file (webapp/runs/bundle.py)


def test_operators_acknowledge_then_explain_with_a_reason(log, operator):
    a = log["spike"]
    resp = operator.post(f"/runs/{RUN}/anomalies/{a.id}/triage/", {"action": "acknowledge"})
    assert resp.status_code == 302 and resp["Location"].endswith(f"/runs/{RUN}/anomalies/#a-{a.id}")
    a.refresh_from_db()
    assert a.status == "acknowledged" and a.acknowledged_by.username == "op" and a.acknowledged_at
    html = operator.get(f"/runs/{RUN}/anomalies/").content.decode()
    assert 'name="action"' in html and "acknowledged by op" in html
    resp = operator.post(f"/api/runs/{RUN}/anomalies/{a.id}/", json.dumps(
        {"action": "explain", "note": "lr spike injected <b>on purpose</b>"}), content_type="application/json")
    assert resp.status_code == 200
    body = resp.json()
    assert body["status"] == "explained" and body["resolved_by"] == "op" and body["acknowledged_by"] == "op"
    assert body["note"] == "lr spike injected <b>on purpose</b>"
    html = Client().get(f"/runs/{RUN}/anomalies/").content.decode()
    assert "lr spike injected &lt;b&gt;on purpose&lt;/b&gt;" in html  # escaped, never markup


def test_triage_refuses_what_the_status_does_not_allow_and_dismissals_without_a_reason(log, operator):
    a = log["grad"]
    url = f"/api/runs/{RUN}/anomalies/{a.id}/"

    def post(body):
        return operator.post(url, json.dumps(body) if not isinstance(body, str) else body,
                             content_type="application/json")

    assert post({"action": "false_alarm"}).status_code == 400  # why?
    assert post({"action": "false_alarm", "note": "   "}).status_code == 400
    assert post({"action": "delete"}).status_code == 400
    assert post({"action": ["acknowledge"]}).status_code == 400
    assert post("[1, 2]").status_code == 400 and post("{").status_code == 400
    assert post({"action": "false_alarm", "note": "checkpoint save, not a spike"}).status_code == 200
    resp = post({"action": "acknowledge"})
    assert resp.status_code == 409 and "false alarm" in resp.json()["error"]
    page = operator.post(f"/runs/{RUN}/anomalies/{a.id}/triage/", {"action": "explain", "note": "x"})
    assert page.status_code == 409
    assert operator.post(f"/api/runs/{RUN}/anomalies/999999/", "{}", content_type="application/json"
                         ).status_code == 404
    a.refresh_from_db()
    assert a.status == "false_alarm" and a.note == "checkpoint save, not a spike"


def test_triage_is_operators_only(log):
    member = Client()
    member.force_login(make_user("mem", "member"))
    url = f"/api/runs/{RUN}/anomalies/{log['spike'].id}/"
    assert Client().post(url, "{}", content_type="application/json").status_code == 401
    assert member.post(url, "{}", content_type="application/json").status_code == 403
