"""Text that is not well-formed (a lone UTF-16 surrogate, which JSON's \\uD800 escape can carry) is refused at the API
edge with a 400 naming the field, on every JSON write: never a 500 further in (nh3, Redis, the database)."""

from __future__ import annotations

import json

import pytest
from django.core.cache import cache
from django.test import Client

from observatory import contract
from webapp.annotations.models import Annotation, Reply
from webapp.metrics.models import Series
from webapp.runs.models import Run

from .accounts.conftest import make_user

pytestmark = pytest.mark.django_db
RUN = "text-run"
LONE = "a\ud800b"  # json.dumps writes it as the escape a client can send


@pytest.fixture(autouse=True)
def _setup(db, redis_client, settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    cache.clear()
    run = Run.objects.create(id=RUN, name=RUN, last_step=100, config={"train": {}})
    Series.objects.create(run=run, name=contract.M_LOSS, count=101, first_step=0, last_step=100)


def _client(role: str) -> Client:
    c = Client(raise_request_exception=False)
    c.user = make_user(f"{role}-text", role)
    c.force_login(c.user)
    return c


def _send(client, method: str, path: str, body: dict, **extra):
    return getattr(client, method)(path, json.dumps(body), content_type="application/json", **extra)


def _refused(resp, field: str):
    assert resp.status_code == 400, (resp.status_code, resp.content[:300])
    data = resp.json()
    assert data["field"] == field and "surrogate" in data["error"], data


NEW = {"title": "spike", "body": "text", "tags": ["spike"], "step_start": 10}


@pytest.mark.parametrize("field", ["title", "body"])
def test_a_new_annotation_with_a_lone_surrogate_is_a_400_naming_the_field(field):
    _refused(_send(_client("member"), "post", f"/api/runs/{RUN}/annotations/", {**NEW, field: LONE}), field)
    assert not Annotation.objects.exists()


def test_a_lone_surrogate_in_a_tag_an_edit_a_reply_or_a_reason_is_a_400_naming_it():
    member = _client("member")
    a = Annotation.objects.create(run_id=RUN, author=member.user, title="t", body="b", body_html="<p>b</p>",
                                  step_start=1, step_end=2)
    _refused(_send(member, "post", f"/api/runs/{RUN}/annotations/", {**NEW, "tags": ["spike", LONE]}), "tags[1]")
    _refused(_send(member, "patch", f"/api/annotations/{a.id}/", {"title": LONE}), "title")
    _refused(_send(member, "patch", f"/api/annotations/{a.id}/", {"body": "ok\udfff"}), "body")
    _refused(_send(member, "post", f"/api/annotations/{a.id}/replies/", {"body": LONE}), "body")
    r = Reply.objects.create(annotation=a, author=member.user, body="r", body_html="<p>r</p>")
    _refused(_send(member, "patch", f"/api/replies/{r.id}/", {"body": LONE}), "body")
    moderator = _client("moderator")
    _refused(_send(moderator, "post", f"/api/annotations/{a.id}/moderation/", {"action": "hide", "reason": LONE}),
             "reason")
    assert Annotation.objects.get().title == "t" and Reply.objects.get().body == "r"


def test_a_command_with_a_lone_surrogate_is_a_400_and_nothing_is_sent(redis_client):
    op = _client("operator")
    _refused(_send(op, "post", f"/api/runs/{RUN}/commands/", {"command": "pause", "reason": LONE}), "reason")
    _refused(_send(op, "post", f"/api/runs/{RUN}/commands/",
                   {"command": "set-mixture", "args": {"weights": {LONE: 1}}, "reason": "r"}), "args.weights")
    assert redis_client.xlen(contract.control_stream(RUN)) == 0


def test_an_anomaly_note_and_telemetry_with_a_lone_surrogate_are_400s(redis_client):
    from webapp.accounts.models import WriteToken
    from webapp.anomalies.models import Anomaly

    a = Anomaly.objects.create(run_id=RUN, key="k", kind="loss_spike", metric=contract.M_LOSS, start_step=1,
                               peak_step=1, detected_step=1, severity="warning", score=1.0)
    _refused(_send(_client("operator"), "post", f"/api/runs/{RUN}/anomalies/{a.id}/",
                   {"action": "explain", "note": LONE}), "note")
    user = make_user("text-pub", "member")
    secret = WriteToken.issue(user, "t", ["text-pub-*"])[1]
    msg = {"kind": "event", "data": {"t": 1.0, "name": LONE, "payload": {}}}
    _refused(_send(Client(raise_request_exception=False), "post", contract.intake_path("text-pub-1"),
                   {"messages": [msg]}, HTTP_AUTHORIZATION=f"Bearer {secret}"), "messages[0].data.name")
    assert redis_client.exists(contract.telemetry_stream("text-pub-1")) == 0
