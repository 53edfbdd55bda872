"""Every run has an owner record (webapp.intake.models.RunClaim): a trainer's run is claimed for the trainer when
ingest first sees it, an HTTP publisher's run by its user. A write token is never scoped to, and never writes to,
a run its user does not own, whatever Redis holds (its run set or the streams may be lost)."""

from __future__ import annotations

import html
import importlib
import json

import pytest
from django.apps import apps
from django.test import Client

from observatory import contract
from webapp.accounts.models import WriteToken
from webapp.intake.models import RunClaim
from webapp.metrics.models import Point
from webapp.runs.models import Run

from ..conftest import Trainer

T = 1_700_000_000.0
RUN = "demo-trainer"


def _post(secret, run_id, step=0, loss=99.0):
    msgs = [{"kind": "metrics", "data": {"t": T, "step": step, "values": {contract.M_LOSS: loss}}}]
    return Client().post(contract.intake_path(run_id), json.dumps({"messages": msgs}),
                         content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {secret}")


def _points(run_id):
    return sorted(Point.objects.filter(series__run_id=run_id).values_list("series__name", "step", "value"))


def _signed_in(user):
    c = Client()
    c.force_login(user)
    return c


@pytest.fixture
def trainer_run(redis_client, ingestor):
    """A run the trainer published straight into Redis, ingested once."""
    t = Trainer(redis_client, RUN)
    t.send("run", name="demo", config={})
    for step in range(3):
        t.metrics(step, **{contract.M_LOSS: 3.0 - step})
    ingestor.drain()
    return t


@pytest.mark.django_db
def test_a_trainer_run_stays_the_trainers_when_redis_loses_its_run_set(trainer_run, redis_client, ingestor,
                                                                      publisher_token):
    claim = RunClaim.objects.get(pk=RUN)
    assert claim.kind == RunClaim.TRAINER and claim.user is None
    before = _points(RUN)
    assert len(before) == 3
    redis_client.delete(contract.RUNS_KEY, contract.telemetry_stream(RUN))  # Redis lost the run set and stream

    mallory, secret = publisher_token("mallory", "demo-*")
    resp = _signed_in(mallory).post("/accounts/tokens/", {"label": "take over", "scope": f"mallory-*, {RUN}"})
    assert resp.status_code == 400 and f"{RUN} is the trainer's run" in html.unescape(resp.content.decode())
    assert WriteToken.objects.filter(user=mallory).count() == 1  # only the fixture's
    with pytest.raises(ValueError, match="trainer's run"):  # nor from a shell: issue() itself refuses
        WriteToken.issue(mallory, "shell", [RUN])

    resp = _post(secret, RUN)  # a token scoped by prefix reaches the id: the claim still refuses it
    assert resp.status_code == 403 and "another publisher" in resp.json()["error"]
    assert not redis_client.exists(contract.telemetry_stream(RUN))
    ingestor.drain()
    assert _points(RUN) == before
    assert _post(secret, "demo-mallory").status_code == 202  # a new id under the same prefix is hers to claim
    assert RunClaim.objects.get(pk="demo-mallory").user == mallory


@pytest.mark.django_db
def test_a_run_published_straight_to_redis_is_refused_before_ingest_sees_it(redis_client, publisher_token):
    t = Trainer(redis_client, RUN)
    t.metrics(0, **{contract.M_LOSS: 1.0})
    redis_client.delete(contract.RUNS_KEY)  # its stream alone says a producer has it
    _, secret = publisher_token("mallory", "demo-*")
    assert _post(secret, RUN).status_code == 403
    assert redis_client.xlen(contract.telemetry_stream(RUN)) == 1 and not RunClaim.objects.filter(pk=RUN).exists()


@pytest.mark.django_db
def test_an_http_run_stays_its_publishers_through_ingest_and_others_cannot_scope_to_it(redis_client, ingestor,
                                                                                       publisher_token):
    alice, alice_secret = publisher_token("alice", "exp-1")
    bob, _ = publisher_token("bob", "bob-*")
    assert _post(alice_secret, "exp-1").status_code == 202
    ingestor.drain()
    claim = RunClaim.objects.get(pk="exp-1")
    assert claim.user == alice and claim.kind == RunClaim.PUBLISHER
    assert Run.objects.filter(pk="exp-1").exists()
    redis_client.delete(contract.RUNS_KEY)
    assert _post(alice_secret, "exp-1", step=1).status_code == 202
    resp = _signed_in(bob).post("/accounts/tokens/", {"label": "x", "scope": "exp-1"})
    assert resp.status_code == 400 and "exp-1 belongs to another user" in html.unescape(resp.content.decode())
    assert _signed_in(alice).post("/accounts/tokens/", {"label": "again", "scope": "exp-1 fresh-id"}).status_code \
        == 201


@pytest.mark.django_db
def test_the_migration_gives_every_run_without_a_claim_an_owner(redis_client, publisher_token):
    _, secret = publisher_token("mallory", "old-*")
    Run.objects.create(id="old-live", source="stream")  # a trainer's run ingested before runs had owners
    Run.objects.create(id="old-tb", source="tensorboard")
    Run.objects.create(id="old-http", source="stream")
    alice, _ = publisher_token("alice", "old-http")
    RunClaim.objects.create(run_id="old-http", user=alice)
    migration = importlib.import_module("webapp.intake.migrations.0003_runclaim_kind")
    migration.backfill(apps, None)
    kinds = dict(RunClaim.objects.values_list("run_id", "kind"))
    assert kinds == {"old-live": RunClaim.TRAINER, "old-tb": RunClaim.IMPORT, "old-http": RunClaim.PUBLISHER}
    assert RunClaim.objects.get(pk="old-http").user == alice
    assert not redis_client.sismember(contract.RUNS_KEY, "old-live")
    assert _post(secret, "old-live").status_code == 403 and _post(secret, "old-tb").status_code == 403
