"""POST /api/runs/<id>/telemetry/: write tokens, scopes, run ownership, limits, and what lands on the stream."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from observatory import contract
from webapp.accounts.models import WriteToken
from webapp.intake import views

from ..servers import free_port

T = 1_700_000_000.0


def _url(run_id):
    return contract.intake_path(run_id)


def _post(secret, run_id, messages=None, body=None, client=None):
    body = body if body is not None else json.dumps({"messages": messages})
    auth = {"HTTP_AUTHORIZATION": f"Bearer {secret}"} if secret else {}
    return (client or Client()).post(_url(run_id), body, content_type="application/json", **auth)


def _stream(redis_client, run_id):
    return [contract.decode(f, expect_run=run_id) for _, f in redis_client.xrange(contract.telemetry_stream(run_id))]


def _metrics(step, loss):
    return {"kind": "metrics", "data": {"t": T, "step": step, "values": {contract.M_LOSS: loss}}}


def test_it_writes_a_valid_batch_onto_the_stream_as_a_redis_producer_does(publisher_token, redis_client):
    _, secret = publisher_token("alice")
    msgs = [{"kind": "run", "data": {"t": T, "name": "exp", "config": {"lr": 0.1}}},
            {"kind": "state", "data": {"t": T, "state": "training", "step": 0}},
            _metrics(0, 2.5), _metrics(1, float("nan")),
            {"kind": "heartbeat", "data": {"t": T, "phase": "training", "step": 1, "eta_s": None}}]
    resp = _post(secret, "alice-1", body=json.dumps({"messages": msgs}, allow_nan=True))
    assert resp.status_code == 202, resp.content
    assert resp.json() == {"run_id": "alice-1", "accepted": 5}
    got = _stream(redis_client, "alice-1")
    assert [m.kind for m in got] == ["run", "state", "metrics", "metrics", "heartbeat"]
    assert got[3].data["values"][contract.M_LOSS] != got[3].data["values"][contract.M_LOSS]  # NaN kept
    assert redis_client.sismember(contract.RUNS_KEY, "alice-1")
    assert json.loads(redis_client.get(contract.heartbeat_key("alice-1")))["step"] == 1
    assert 0 < redis_client.ttl(contract.heartbeat_key("alice-1")) <= contract.HEARTBEAT_TTL_S


def test_it_rejects_a_batch_with_one_bad_message_naming_it_and_writes_nothing(publisher_token, redis_client):
    _, secret = publisher_token("alice")
    msgs = [_metrics(0, 1.0), {"kind": "metrics", "data": {"t": T, "step": -1, "values": {}}}, _metrics(2, 1.0)]
    resp = _post(secret, "alice-1", msgs)
    assert resp.status_code == 400
    assert resp.json()["index"] == 1 and resp.json()["reason"] == "wrong_type"
    assert "message 1" in resp.json()["error"]
    assert not redis_client.exists(contract.telemetry_stream("alice-1"))
    assert not redis_client.sismember(contract.RUNS_KEY, "alice-1")
    for bad, reason in (({"kind": "nope", "data": {"t": T}}, "unknown_kind"), ([1, 2], "bad_message"),
                        ({"kind": "state"}, "bad_message")):
        assert _post(secret, "alice-1", [bad]).json()["reason"] == reason


@pytest.mark.parametrize("body,status,needle", [
    ("not json", 400, "not JSON"),
    ('{"msgs": []}', 400, '"messages"'),
    (json.dumps({"messages": [_metrics(s, 1.0) for s in range(contract.INTAKE_MAX_MESSAGES + 1)]}), 413, "at most"),
    (json.dumps({"messages": [], "pad": "x" * contract.INTAKE_MAX_BYTES}), 413, "limit"),
])
def test_it_refuses_malformed_and_oversized_bodies_clearly(publisher_token, redis_client, body, status, needle):
    _, secret = publisher_token("alice")
    resp = _post(secret, "alice-1", body=body)
    assert resp.status_code == status and needle in resp.json()["error"]
    assert not redis_client.exists(contract.telemetry_stream("alice-1"))


def test_missing_unknown_and_revoked_tokens_get_401_and_a_session_is_not_a_token(publisher_token, redis_client):
    user, secret = publisher_token("alice")
    ok = [_metrics(0, 1.0)]
    assert _post(None, "alice-1", ok).status_code == 401
    assert _post("obs_not-a-real-token", "alice-1", ok).status_code == 401
    assert _post(secret[:-1], "alice-1", ok).status_code == 401
    session = Client()
    session.force_login(user)
    assert _post(None, "alice-1", ok, client=session).status_code == 401
    assert _post(secret, "alice-1", ok).status_code == 202
    WriteToken.objects.get(user=user).revoke()
    resp = _post(secret, "alice-1", ok)
    assert resp.status_code == 401 and resp["WWW-Authenticate"] == "Bearer"
    assert _post(publisher_token("bob")[1], "bob-1", ok).status_code == 202  # others' tokens unaffected
    fresh = WriteToken.issue(user, "again", ["alice-*"])[1]
    user.is_active = False  # a deactivated account's tokens stop working with it
    user.save()
    assert _post(fresh, "alice-1", ok).status_code == 401


def test_the_scope_is_enforced_by_exact_id_and_by_prefix(publisher_token, redis_client):
    _, secret = publisher_token("alice", "alice-*", "shared-exp")
    ok = [_metrics(0, 1.0)]
    assert _post(secret, "alice-7", ok).status_code == 202
    assert _post(secret, "shared-exp", ok).status_code == 202
    for outside in ("shared-exp-2", "bob-1", "alic"):
        resp = _post(secret, outside, ok)
        assert resp.status_code == 403 and "not scoped" in resp.json()["error"]
    assert not redis_client.exists(contract.telemetry_stream("bob-1"))


def test_a_run_belongs_to_its_first_publisher(publisher_token, redis_client):
    _, alice = publisher_token("alice", "exp-*")
    _, bob = publisher_token("bob", "exp-*", "demo-*")
    ok = [_metrics(0, 1.0)]
    assert _post(alice, "exp-1", ok).status_code == 202
    assert _post(alice, "exp-1", ok).status_code == 202
    resp = _post(bob, "exp-1", ok)
    assert resp.status_code == 403 and "another publisher" in resp.json()["error"]
    redis_client.sadd(contract.RUNS_KEY, "demo-trainer")  # a run the trainer publishes straight to Redis
    assert _post(bob, "demo-trainer", ok).status_code == 403
    assert len(_stream(redis_client, "exp-1")) == 2 and not _stream(redis_client, "demo-trainer")


def test_a_token_of_a_user_without_the_role_is_refused(publisher_token, redis_client):
    from webapp.accounts import roles

    user, secret = publisher_token("alice")
    roles.revoke(user, roles.MEMBER)
    assert _post(secret, "alice-1", [_metrics(0, 1.0)]).status_code == 403


def test_it_needs_no_csrf_token_and_takes_only_post(publisher_token, redis_client):
    _, secret = publisher_token("alice")
    strict = Client(enforce_csrf_checks=True)
    assert _post(secret, "alice-1", [_metrics(0, 1.0)], client=strict).status_code == 202
    assert strict.get(_url("alice-1"), HTTP_AUTHORIZATION=f"Bearer {secret}").status_code == 405


def test_it_rate_limits_per_token_with_a_429(publisher_token, redis_client, monkeypatch):
    monkeypatch.setattr(views, "INTAKE_RATE", "2/m")
    _, alice = publisher_token("alice")
    _, bob = publisher_token("bob")
    ok = [_metrics(0, 1.0)]
    assert [_post(alice, "alice-1", ok).status_code for _ in range(3)] == [202, 202, 429]
    assert "too many" in _post(alice, "alice-1", ok).json()["error"]
    assert _post(bob, "bob-1", ok).status_code == 202


def test_it_answers_503_when_redis_is_unreachable(publisher_token, settings):
    _, secret = publisher_token("alice")
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"
    resp = _post(secret, "alice-1", [_metrics(0, 1.0)])
    assert resp.status_code == 503 and "retry" in resp.json()["error"]


def test_it_keeps_the_stream_caps_counting_unread_entries_it_trims(publisher_token, redis_client, monkeypatch):
    monkeypatch.setattr(contract, "STREAM_MAXLEN", 50)
    monkeypatch.setattr(contract, "STREAM_HARD_MAXLEN", 100)
    monkeypatch.setattr(contract, "TRIM_EVERY_S", 0.0)
    _, secret = publisher_token("alice")
    stream = contract.telemetry_stream("alice-capped")
    assert _post(secret, "alice-capped", [_metrics(0, 1.0)]).status_code == 202  # claims the run
    redis_client.xgroup_create(stream, contract.INGEST_GROUP, id="0")  # ingest, never reading
    for batch in range(1, 5):
        resp = _post(secret, "alice-capped", [_metrics(batch * 60 + i, 1.0) for i in range(60)])
        assert resp.status_code == 202, resp.content
    lost = int(redis_client.hget(contract.telemetry_lost_key("alice-capped"), "trimmed"))
    assert redis_client.xlen(stream) <= 101
    assert lost == redis_client.xinfo_stream(stream)["entries-added"] - redis_client.xlen(stream)
    assert _stream(redis_client, "alice-capped")[-1].data["name"] == contract.TELEMETRY_LOST_EVENT
