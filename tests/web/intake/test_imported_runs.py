"""An imported run (TensorBoard or W&B) is nobody's to claim over HTTP: a write token may append to it only when
its user is the run's --owner. Runs imported before importers claimed them are claimed by the intake migration."""

from __future__ import annotations

import importlib
import io
import json

from django.apps import apps
from django.core.management import call_command
from django.test import Client

from observatory import contract
from webapp.intake.models import RunClaim
from webapp.transfer import wandb_import
from webapp.runs.models import Run

T = 1_700_000_000.0
OK = [{"kind": "metrics", "data": {"t": T, "step": 99, "values": {contract.M_LOSS: 1.0}}}]


def _post(secret, run_id):
    return Client().post(contract.intake_path(run_id), json.dumps({"messages": OK}), content_type="application/json",
                         HTTP_AUTHORIZATION=f"Bearer {secret}")


def _stream(redis_client, run_id):
    return redis_client.xlen(contract.telemetry_stream(run_id))


def _logdir(path):
    from tensorboard.summary import Writer

    for d in ("exp", "mine"):
        w = Writer(str(path / d))
        for step in range(3):
            w.add_scalar("loss", 1.0 / (step + 1), step)
        w.close()
    return path


def test_a_tensorboard_import_cannot_be_claimed_by_another_token(publisher_token, redis_client, tmp_path):
    alice, alice_secret = publisher_token("alice", "tb-*")
    _, bob_secret = publisher_token("bob", "tb-*")
    call_command("import_tensorboard", str(_logdir(tmp_path / "logs")), stdout=io.StringIO())
    assert RunClaim.objects.get(pk="tb-exp").user is None
    for secret in (bob_secret, alice_secret):  # nobody's: no token appends, however scoped
        resp = _post(secret, "tb-exp")
        assert resp.status_code == 403 and "another publisher" in resp.json()["error"]
    assert _stream(redis_client, "tb-exp") == 0

    # imported for alice: her token appends, bob's does not; a re-import without --owner keeps her claim
    call_command("import_tensorboard", str(tmp_path / "logs"), "--run-prefix", "tb-alice-", "--owner", "alice",
                 stdout=io.StringIO())
    assert RunClaim.objects.get(pk="tb-alice-mine").user == alice
    assert _post(bob_secret, "tb-alice-mine").status_code == 403
    assert _post(alice_secret, "tb-alice-mine").status_code == 202
    assert _stream(redis_client, "tb-alice-mine") == 1
    call_command("import_tensorboard", str(tmp_path / "logs"), "--run-prefix", "tb-alice-", stdout=io.StringIO())
    assert RunClaim.objects.get(pk="tb-alice-mine").user == alice


def test_an_import_never_takes_an_id_an_http_publisher_claimed(publisher_token, redis_client, tmp_path):
    _, bob_secret = publisher_token("bob", "tb-*")
    assert _post(bob_secret, "tb-exp").status_code == 202  # bob's run, not yet ingested (no Run row)
    call_command("import_tensorboard", str(_logdir(tmp_path / "logs")), stdout=io.StringIO())
    assert Run.objects.get(pk="tb-exp-2").source == "tensorboard"
    assert not Run.objects.filter(pk="tb-exp").exists() and RunClaim.objects.get(pk="tb-exp").user.username == "bob"


def test_a_wandb_import_is_claimed_too(publisher_token, redis_client):
    _, bob_secret = publisher_token("bob", "wandb-*")
    data = {"run_id": "abc", "name": "baseline", "config": {}, "history": [{"_step": 0, "loss": 1.0,
            "_timestamp": T}], "skipped": [], "exit_code": 0, "path": "/x/run-abc.wandb"}
    wandb_import.write(wandb_import.plan(data, "wandb-abc"))
    assert _post(bob_secret, "wandb-abc").status_code == 403
    assert _stream(redis_client, "wandb-abc") == 0


def test_runs_imported_before_the_fix_are_claimed_by_the_migration(publisher_token, redis_client):
    _, bob_secret = publisher_token("bob", "old-*")
    Run.objects.create(id="old-wandb", source="wandb")
    Run.objects.create(id="old-live", source="stream")  # a live run: the Redis run set guards it, as before
    migration = importlib.import_module("webapp.intake.migrations.0002_runclaim_nobody")
    migration.claim_imported_runs(apps, None)
    assert RunClaim.objects.get(pk="old-wandb").user is None
    assert not RunClaim.objects.filter(pk="old-live").exists()
    assert _post(bob_secret, "old-wandb").status_code == 403
