"""The authorization matrix, cell by cell: every persona against every write and every non-public read.

Each CELL names an action of webapp.accounts.permissions.MATRIX and a request that exercises it. For each
persona the request must succeed where the matrix allows the persona, and otherwise be refused: 401 (JSON) or
a redirect to the log-in page (pages) for anonymous visitors, 403 for a signed-in role without the right.
"""

from __future__ import annotations

import itertools
import json

import pytest
from django.urls import URLPattern, URLResolver, get_resolver

from webapp.accounts.permissions import MATRIX
from webapp.accounts.roles import PERSONAS
from webapp.runs.models import Run

from .conftest import make_user

RUN = "matrix-run"
ANOMALY = 4242  # the anomaly `world` creates (triage cells)
ANNOTATION = 4343  # the annotation `world` creates (thread cells), by a user who is no persona
REPORT = 4545  # the published report `world` creates, by the same user
_n = itertools.count()


def _cmd_body():
    return json.dumps({"command": "pause", "reason": "matrix test", "id": f"matrix-{next(_n):08d}"})


# (action, method, path, body factory or None, JSON endpoint?)
CELLS = [
    ("runs.view", "get", "/", None, False),
    ("runs.view", "get", f"/runs/{RUN}/", None, False),
    ("runs.view", "get", "/runs/", None, False),
    ("runs.view", "get", "/api/front/", None, True),
    ("runs.view", "get", f"/runs/{RUN}/preview.png", None, False),
    ("runs.view", "get", f"/annotations/{ANNOTATION}/preview.png", None, False),
    ("runs.view", "get", f"/annotations/{ANNOTATION}/thread/", None, False),
    ("runs.view", "get", "/api/runs/", None, True),
    ("runs.view", "get", f"/api/runs/{RUN}/", None, True),
    ("runs.view", "get", f"/api/runs/{RUN}/events/", None, True),
    ("runs.view", "get", f"/api/v1/runs/{RUN}/export.csv", None, True),
    ("runs.view", "get", f"/api/v1/runs/{RUN}/export.json", None, True),
    ("runs.view", "get", f"/api/v1/runs/{RUN}/export.parquet", None, True),
    ("runs.view", "get", f"/api/v1/runs/{RUN}/records.json", None, True),
    ("runs.view", "get", "/api/schema/", None, True),
    ("runs.view", "get", "/api/docs/", None, False),
    ("runs.view", "get", f"/compare/?runs={RUN}", None, False),
    ("runs.view", "get", f"/api/compare/?runs={RUN}", None, True),
    ("account.auth", "get", "/accounts/login/", None, False),
    ("account.auth", "get", "/accounts/signup/", None, False),
    ("account.profile", "get", "/accounts/profile/", None, False),
    ("account.profile", "post", "/accounts/profile/", lambda: {"display_name": "x"}, False),
    ("run.command", "get", f"/api/runs/{RUN}/commands/", None, True),
    ("run.command", "post", f"/api/runs/{RUN}/commands/", _cmd_body, True),
    ("run.command", "get", "/operate/", None, False),
    ("run.command", "get", "/api/operate/", None, True),
    ("run.command", "get", f"/api/runs/{RUN}/plan/?tokens=2000000", None, True),
    ("runs.view", "get", f"/runs/{RUN}/log/", None, False),
    ("runs.view", "get", f"/api/runs/{RUN}/interventions/", None, True),
    ("run.publish", "post", "/accounts/tokens/", lambda: {"label": "matrix", "scope": "matrix-*"}, False),
    ("runs.view", "get", "/healthz", None, True),
    ("ops.metrics", "get", "/metrics", None, True),
    ("runs.view", "get", f"/runs/{RUN}/anomalies/", None, False),
    ("runs.view", "get", f"/api/runs/{RUN}/anomalies/", None, True),
    ("runs.view", "get", "/experiments/", None, False),
    ("runs.view", "get", "/experiments/matrix-exp/", None, False),
    ("runs.view", "get", f"/api/runs/{RUN}/forecast/", None, True),
    ("anomaly.acknowledge", "post", f"/runs/{RUN}/anomalies/{ANOMALY}/triage/", lambda: {"action": "acknowledge"},
     False),
    ("anomaly.acknowledge", "post", f"/api/runs/{RUN}/anomalies/{ANOMALY}/",
     lambda: json.dumps({"action": "false_alarm", "note": "matrix test"}), True),
    ("runs.view", "get", f"/api/runs/{RUN}/annotations/", None, True),
    ("runs.view", "get", f"/api/runs/{RUN}/annotations/?format=grafana", None, True),
    ("runs.view", "get", f"/api/annotations/{ANNOTATION}/", None, True),
    ("runs.view", "get", f"/api/annotations/{ANNOTATION}/replies/", None, True),
    ("runs.view", "get", f"/api/annotations/{ANNOTATION}/revisions/", None, True),
    ("annotation.create", "post", f"/api/runs/{RUN}/annotations/",
     lambda: json.dumps({"title": "matrix", "step_start": 5, "step_end": 9, "tags": ["spike"]}), True),
    ("annotation.create", "post", f"/api/annotations/{ANNOTATION}/replies/", lambda: json.dumps({"body": "m"}), True),
    ("annotation.react", "post", f"/api/annotations/{ANNOTATION}/reactions/", lambda: json.dumps({"kind": "+1"}),
     True),
    ("annotation.moderate", "post", f"/api/annotations/{ANNOTATION}/moderation/",
     lambda: json.dumps({"action": "hide", "reason": "matrix test"}), True),
    ("runs.view", "get", "/reports/", None, False),
    ("runs.view", "get", f"/reports/{REPORT}/", None, False),
    ("runs.view", "get", f"/reports/{REPORT}/history/", None, False),
    ("runs.view", "get", f"/embed/runs/{RUN}/chart/?series=train/loss&steps=0..50", None, False),
    ("runs.view", "get", f"/oembed?url=http://testserver/runs/{RUN}/&format=json", None, True),
    ("runs.view", "get", "/api/reports/", None, True),
    ("runs.view", "get", f"/api/reports/{REPORT}/", None, True),
    ("runs.view", "get", f"/api/reports/{REPORT}/revisions/", None, True),
    ("runs.view", "get", f"/api/runs/{RUN}/reports/", None, True),
    ("report.create", "get", "/reports/new/", None, False),
    ("report.create", "post", "/reports/new/",
     lambda: {"title": "matrix", "body": f"{{{{chart run={RUN} series=train/loss}}}}", "action": "publish"}, False),
    ("report.moderate", "post", f"/reports/{REPORT}/moderation/", lambda: {"action": "hide", "reason": "matrix"},
     False),
]


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    """Four personas are made for each of the ~300 cells: a cheap hasher keeps PBKDF2 from dominating the run (no
    cell logs in with a password: force_login)."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def world(db, settings, redis_client):
    settings.OBS_CONTROL_KEY = b"m" * 32
    Run.objects.create(id=RUN, name=RUN, config={"train": {"batch_size": 4, "lr": 0.01, "token_budget": 1_000_000},
                                                 "model": {"seq_len": 32}})  # the plan preview needs these
    from webapp.anomalies.models import Anomaly

    Anomaly.objects.create(id=ANOMALY, run_id=RUN, key="loss_spike train/loss 10", kind="loss_spike",
                           metric="train/loss", start_step=10, peak_step=10, detected_step=10, severity="critical",
                           score=2.0, explanation="loss 6 at step 10 is 2× its running level 3")
    from webapp.runs.models import RunEvent

    RunEvent.objects.create(run_id=RUN, kind="event", name="forecast", step=0, entry_id="",  # (unverified: a stub)
                            payload={"experiment": {"name": "matrix-exp", "goal": "", "hypothesis": ""}})
    from ..annotations.conftest import matrix_annotation

    matrix_annotation(RUN, ANNOTATION)
    from ..reports.conftest import matrix_report

    matrix_report(REPORT, RUN)


@pytest.mark.parametrize("persona", PERSONAS)
@pytest.mark.parametrize("action,method,path,body,is_json", CELLS, ids=[f"{c[1]} {c[2]}" for c in CELLS])
def test_every_cell_of_the_matrix(world, personas, persona, action, method, path, body, is_json):
    client = personas[persona]
    kwargs = {}
    if body is not None:
        data = body()
        kwargs = {"data": data, "content_type": "application/json"} if isinstance(data, str) else {"data": data}
    resp = getattr(client, method)(path, **kwargs)
    if persona in MATRIX[action]:
        assert resp.status_code < 400, f"{persona} may {action} but got {resp.status_code}"
        if resp.status_code in (301, 302):
            assert "/accounts/login/" not in resp["Location"]
    elif persona == "anonymous":
        if is_json:
            assert resp.status_code == 401
        else:
            assert resp.status_code == 302 and resp["Location"].startswith("/accounts/login/")
    else:
        assert resp.status_code == 403, f"{persona} may not {action} but got {resp.status_code}"


@pytest.mark.parametrize("persona", PERSONAS)
def test_run_publish_through_the_intake_from_every_persona(world, personas, persona):
    """The intake takes write tokens, never sessions: token-less 401, out of scope 403, in scope 202."""
    from django.contrib.auth import get_user_model

    from webapp.accounts.models import WriteToken

    client, url = personas[persona], f"/api/runs/{persona}-run/telemetry/"
    body = json.dumps({"messages": [{"kind": "state", "data": {"t": 1.0, "state": "training", "step": 0}}]})

    def post(secret=None):
        auth = {"HTTP_AUTHORIZATION": f"Bearer {secret}"} if secret else {}
        return client.post(url, body, content_type="application/json", **auth).status_code

    assert post() == 401
    if persona == "anonymous":
        return
    user = get_user_model().objects.get(username=f"{persona}-user")
    assert post(WriteToken.issue(user, "out", ["elsewhere-*"])[1]) == 403
    assert post(WriteToken.issue(user, "in", [f"{persona}-*"])[1]) == (
        202 if persona in MATRIX["run.publish"] else 403)


FAILURE = ("TrainingFailed: loss non-finite for 5 consecutive steps\n"
           'Traceback (most recent call last):\n  File "/home/lab/observatory/training/train.py", line 9\n')


@pytest.mark.parametrize("persona", PERSONAS)
def test_run_failure_detail_is_for_operators_and_the_public_sees_no_host_path(world, personas, persona):
    """A field-level cell: everyone reads the run; only `run.failure_detail` personas get paths and tracebacks."""
    from webapp.runs.models import RunEvent

    run = Run.objects.get(pk=RUN)
    run.state, run.state_detail = "failed", FAILURE
    run.config = {"checkpoint": {"dir": "/srv/obs/var/checkpoints"}, "data": {"corpus": "C:\\data\\web"}}
    run.manifest = {"domains": [{"name": "code", "sources": [{"path": "/usr/lib/python3.11/json/decoder.py"}]}]}
    run.save()
    RunEvent.objects.create(run=run, kind="event", name="resumed", step=3, entry_id="1-0",
                            payload={"directory": "/srv/obs/var/checkpoints/matrix-run"})
    resp = personas[persona].get(f"/api/runs/{RUN}/")
    assert resp.status_code == 200
    body = resp.content.decode()
    if persona in MATRIX["run.failure_detail"]:
        assert resp.json()["state_detail"] == FAILURE and "/srv/obs/var/checkpoints" in body
    else:
        assert resp.json()["state_detail"] == "TrainingFailed: loss non-finite for 5 consecutive steps"
        for leak in ("/srv/", "/home/", "/usr/lib", "C:\\\\", "Traceback"):
            assert leak not in body, leak
        assert resp.json()["manifest"]["domains"][0]["sources"][0]["path"] == "…/decoder.py"


@pytest.mark.parametrize("persona", PERSONAS)
def test_annotation_edit_own_from_every_persona(world, personas, persona):
    """`annotation.edit_own`: each persona edits and deletes its own annotation and reply; nobody edits another's."""
    from django.contrib.auth import get_user_model

    from ..annotations.conftest import own_posts

    client, allowed = personas[persona], persona in MATRIX["annotation.edit_own"]
    mine = own_posts(RUN, get_user_model().objects.filter(username=f"{persona}-user").first())
    refused = 401 if persona == "anonymous" else 403
    for url, own in ((f"/api/annotations/{mine[0]}/", True), (f"/api/replies/{mine[1]}/", True),
                     (f"/api/annotations/{ANNOTATION}/", False)):
        code = client.patch(url, json.dumps({"body": "edited"}), content_type="application/json").status_code
        assert code == (200 if allowed and own else refused), (url, code)
    for url in (f"/api/replies/{mine[1]}/", f"/api/annotations/{mine[0]}/"):
        assert client.delete(url).status_code == (200 if allowed else refused), url


@pytest.mark.parametrize("persona", PERSONAS)
def test_report_edit_own_from_every_persona(world, personas, persona):
    """`report.edit_own`: each persona edits, publishes and deletes its own report; nobody edits another's."""
    from django.contrib.auth import get_user_model

    from webapp.reports.models import Report

    client, allowed = personas[persona], persona in MATRIX["report.edit_own"]
    user = get_user_model().objects.filter(username=f"{persona}-user").first()
    mine = Report.objects.create(author=user, title="mine", body="b", parts=[]).id
    refused = (302,) if persona == "anonymous" else (403,)
    edit = {"title": "edited", "body": "text", "action": "draft"}
    for pk, own in ((mine, True), (REPORT, False)):
        code = client.post(f"/reports/{pk}/edit/", edit).status_code
        assert code in ((302,) if allowed and own else refused), (pk, code)
    assert client.post(f"/reports/{mine}/publish/").status_code in ((302,) if allowed else refused)
    assert client.post(f"/reports/{REPORT}/delete/").status_code in refused
    assert client.post(f"/reports/{mine}/delete/").status_code in ((302,) if allowed else refused)
    if allowed:
        assert Report.objects.get(pk=mine).title == "edited" and Report.objects.get(pk=mine).deleted_at is not None
        location = client.post(f"/reports/{REPORT}/edit/", edit)
        assert location.status_code == 403


FIELD_CELLS = {"run.failure_detail"}  # tested above: a field of a public answer, not an endpoint
OWN_CELLS = {"annotation.edit_own", "report.edit_own"}  # tested above: "own" differs per persona


def test_every_action_in_the_matrix_has_cells_in_this_test():
    assert {c[0] for c in CELLS} | FIELD_CELLS | OWN_CELLS | {"run.publish"} == set(MATRIX)


def _routes(patterns, prefix=""):
    for p in patterns:
        if isinstance(p, URLResolver):
            if p.namespace == "admin":
                continue  # Django's admin: staff-only by Django's own permissions (see permissions.py)
            yield from _routes(p.url_patterns, prefix + str(p.pattern))
        elif isinstance(p, URLPattern):
            yield prefix + str(p.pattern), p.callback


def test_every_routed_view_declares_its_matrix_action():
    undeclared = [route for route, view in _routes(get_resolver().url_patterns)
                  if getattr(view, "obs_action", None) not in MATRIX and not route.startswith("static/")]
    assert not undeclared, f"views without @public/@requires/@api_requires: {undeclared}"


def test_session_posts_need_a_csrf_token(world, personas):
    from django.test import Client

    from .conftest import make_user

    client = Client(enforce_csrf_checks=True)
    client.force_login(make_user("csrf-op", "operator"))
    resp = client.post(f"/api/runs/{RUN}/commands/", _cmd_body(), content_type="application/json")
    assert resp.status_code == 403
    assert client.post("/accounts/profile/", {"display_name": "x"}).status_code == 403
