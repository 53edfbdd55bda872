"""The API's envelope: /api/v1/ paths and the version header, one error shape, `?limit=&cursor=` pagination with
`next` links, ETag/Cache-Control on series windows, and a schema that names every routed /api/ pattern."""

from __future__ import annotations

import datetime as dt
import json
import re

import pytest
from django.db import transaction
from django.urls import URLPattern, URLResolver, get_resolver

from observatory import contract
from webapp.metrics import storage
from webapp.metrics.models import Series
from webapp.publicapi import openapi
from webapp.runs.models import Run, RunEvent

pytestmark = pytest.mark.django_db


def _series_run(run_id: str, state: str) -> Run:
    run = Run.objects.create(id=run_id, name=run_id, state=state, last_step=9)
    s = Series.objects.create(run=run, name="train/loss")
    with transaction.atomic():
        storage.bulk_load(s.id, [(i, 10.0 - i) for i in range(10)])
    return run


def test_versioned_paths_serve_the_same_answers_with_the_version_header(client):
    _series_run("v-run", "training")
    old, new = client.get("/api/runs/v-run/metrics/"), client.get("/api/v1/runs/v-run/metrics/")
    assert old.status_code == new.status_code == 200 and old.json() == new.json()
    assert old["API-Version"] == new["API-Version"] == "1"
    resp = client.get("/api/v2/runs/")
    assert resp.status_code == 404 and resp.json()["code"] == "not_found" and "/api/v1/" in resp.json()["error"]


@pytest.mark.parametrize("method,url,status,code", [
    ("get", "/api/v1/no/such/route/", 404, "not_found"),
    ("get", "/api/v1/runs/nope/", 404, "not_found"),
    ("get", "/api/v1/runs/?limit=0", 400, "bad_request"),
    ("post", "/api/v1/runs/", 405, "method_not_allowed"),
    ("put", "/api/v1/runs/x/telemetry/", 405, "method_not_allowed"),
    ("post", "/api/v1/annotations/1/reactions/", 401, "unauthorized"),
    ("get", "/api/v1/operate/", 401, "unauthorized"),
])
def test_every_api_error_has_one_shape(client, method, url, status, code):
    resp = getattr(client, method)(url)
    assert resp.status_code == status
    body = resp.json()
    assert body["code"] == code and isinstance(body["error"], str) and body["error"]
    if status == 405:
        assert resp["Allow"]


def test_a_rate_limited_api_call_has_the_error_shape(client):
    from ..accounts.conftest import make_user

    Run.objects.create(id="rl", name="rl")
    client.force_login(make_user("rl-member", "member"))
    codes = [client.post("/api/v1/runs/rl/annotations/", "{}", content_type="application/json")
             for _ in range(12)]
    assert codes[0].status_code == 400 and codes[0].json()["code"] == "bad_request"
    assert codes[-1].status_code == 429 and codes[-1].json()["code"] == "rate_limited"
    assert codes[-1]["API-Version"] == "1"


def test_runs_list_pages_by_cursor_and_keeps_the_first_page_as_before(client):
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    for i in range(7):
        Run.objects.create(id=f"p{i}", name=f"p{i}", updated_at=t0 + dt.timedelta(seconds=i // 2))  # ties
    first = client.get("/api/v1/runs/?limit=3").json()
    ids, nxt = [r["id"] for r in first["runs"]], first["next"]
    while nxt:
        assert nxt.startswith("/api/v1/runs/?") and "limit=3" in nxt
        page = client.get(nxt).json()
        ids += [r["id"] for r in page["runs"]]
        nxt = page["next"]
    assert ids == ["p6", "p5", "p4", "p3", "p2", "p1", "p0"]
    assert client.get("/api/runs/").json()["next"] is None  # default limit 200: one page, as before
    assert client.get("/api/runs/?cursor=garbage").json()["parameter"] == "cursor"


def test_events_anomalies_and_annotations_page_the_same_way(client):
    from webapp.anomalies.models import Anomaly
    from webapp.annotations.models import Annotation

    run = Run.objects.create(id="pg", name="pg")
    for i in range(5):
        RunEvent.objects.create(run=run, kind="event", name=f"e{i}", step=i)
        Anomaly.objects.create(run=run, key=f"k{i}", kind="loss_spike", metric="train/loss", start_step=i,
                               peak_step=i, detected_step=i, severity="warning", score=1.0)
        Annotation.objects.create(run=run, title=f"a{i}", step_start=i % 2, step_end=9, tags=["spike"])

    def walk(url, key, field):
        out = []
        while url:
            body = client.get(url).json()
            out += [x[field] for x in body[key]]
            url = body["next"]
        return out

    assert walk("/api/v1/runs/pg/events/?limit=2", "events", "name") == [f"e{i}" for i in range(5)]
    assert walk("/api/v1/runs/pg/anomalies/?limit=2", "anomalies", "start_step") == [4, 3, 2, 1, 0]
    assert walk("/api/v1/runs/pg/annotations/?limit=2", "annotations", "title") == ["a0", "a2", "a4", "a1", "a3"]
    assert client.get("/api/runs/pg/annotations/").json()["truncated"] is False


def test_finished_history_windows_are_publicly_cacheable_with_a_strong_etag(client):
    _series_run("done", "stopped")
    _series_run("live", "training")
    done = client.get("/api/v1/runs/done/metrics/train/loss/?points=100")
    assert done["Cache-Control"] == "public, max-age=600" and re.fullmatch(r'"[0-9a-f]{32}"', done["ETag"])
    again = client.get("/api/v1/runs/done/metrics/train/loss/?points=100", HTTP_IF_NONE_MATCH=done["ETag"])
    assert again.status_code == 304 and again["ETag"] == done["ETag"] and again.content == b""
    other = client.get("/api/v1/runs/done/metrics/train/loss/?points=100&end=4", HTTP_IF_NONE_MATCH=done["ETag"])
    assert other.status_code == 200 and other["ETag"] != done["ETag"]
    live = client.get("/api/v1/runs/live/metrics/train/loss/")
    assert live["Cache-Control"] == "no-cache" and live["ETag"]


def _api_routes(patterns, prefix=""):
    for p in patterns:
        if isinstance(p, URLResolver):
            yield from _api_routes(p.url_patterns, prefix + str(p.pattern))
        elif isinstance(p, URLPattern) and (prefix + str(p.pattern)).startswith("api/"):
            yield prefix + str(p.pattern), p


def test_the_schema_describes_every_routed_api_pattern_and_every_method():
    doc = openapi.document()
    missing = []
    for route, _ in _api_routes(get_resolver().url_patterns):
        path = "/" + re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", route[len("api/"):])
        if path not in doc["paths"]:
            missing.append(path)
    assert not missing, f"routes missing from webapp/publicapi/spec_*.py: {missing}"
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            declared = {p["name"] for p in op["parameters"] if p["in"] == "path"}
            assert declared == set(re.findall(r"{(\w+)}", path)), (method, path)


def test_schema_and_docs_page_are_served(client):
    resp = client.get("/api/schema/")
    assert resp.status_code == 200 and resp.json()["openapi"].startswith("3.")
    page = client.get("/api/docs/")
    assert page.status_code == 200 and b"<script>" not in page.content


def test_docs_page_arrives_with_every_operation_rendered(client):
    """The reference is rendered by the server: every operation of the schema is on the page as it arrives (no
    script draws it), its schema text escaped."""
    doc = client.get("/api/schema/").json()
    html = client.get("/api/docs/").content.decode()
    ops = [(m, p) for p, item in doc["paths"].items() for m in item]
    assert html.count('data-testid="apidocs-op"') == len(ops) > 10
    for method, path in ops:
        assert f'<code class="path">{doc["servers"][0]["url"]}{path}</code>' in html, (method, path)
    assert "Loading the schema" not in html and "js/apidocs.js" not in html
    assert "&quot;type&quot;: &quot;object&quot;" in html  # a response schema, inlined and escaped


def test_run_ids_in_the_schema_and_the_socket_routes_are_the_contracts(run_id_cases):
    params = [p for ops in openapi.document()["paths"].values() for op in ops.values() for p in op["parameters"]
              if p["name"] == "run_id"]
    assert params and {p["schema"]["pattern"] for p in params} == {contract.RUN_ID_PATTERN}
    from webapp.live.routing import websocket_urlpatterns

    run_route = next(r for r in websocket_urlpatterns if "run_id" in r.pattern.regex.pattern)
    for x in run_id_cases:
        assert bool(run_route.pattern.regex.match(f"ws/runs/{x}/")) == bool(contract.RUN_ID_RE.match(x)), repr(x)
