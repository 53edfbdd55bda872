"""A key per run: the web tier holds the master and signs each run's commands with that run's derived key; a
trainer (the real training.control.ControlChannel on the real Redis) holds its own run's key only, and refuses a
command signed with another run's key with an ack that says so. Rotating one run's key leaves the others as they were;
the CLI signs with the run key it is given."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from django.core.management import call_command

from observatory import contract
from training.control import ControlChannel
from webapp.runs.models import Run

from tests.support import wait_for

from ..servers import ROOT
from .conftest import CONFIG, MANIFEST

pytestmark = pytest.mark.django_db
A, B = "keys-run-a", "keys-run-b"


@pytest.fixture
def until():
    return lambda condition, timeout, what: wait_for(condition, timeout, what, every=0.02)


@pytest.fixture
def runs(db):
    return [Run.objects.create(id=r, name=r, config=CONFIG, manifest=MANIFEST, last_step=10) for r in (A, B)]


@pytest.fixture
def trainers(redis_url):
    """trainer(run_id, key) -> a started ControlChannel: the trainer's end of the channel, holding one run's key."""
    started = []

    def start(run_id, key):
        ch = ControlChannel(redis_url, run_id, key, block_ms=50)
        ch.start({}, None)
        started.append(ch)
        return ch

    yield start
    for ch in started:
        ch.close()


def _key_of(run_id: str, capsys) -> bytes:
    call_command("control_key", run_id)
    line = capsys.readouterr().out.strip()
    assert line.startswith(contract.RUN_CONTROL_KEY_ENV + "=")
    return line.split("=", 1)[1].encode()


def _final(redis_client, run_id, cmd_id, until) -> dict:
    def acks():
        entries = redis_client.xrange(contract.ack_stream(run_id))
        out = [{k.decode(): v.decode() for k, v in f.items()} for _, f in entries]
        return [a for a in out if a["id"] == cmd_id and a["status"] in ("accepted", "rejected")]
    return until(acks, 30, f"an ack of {cmd_id}")[-1]


def _send(client, run_id, **body):
    resp = client.post(f"/api/runs/{run_id}/commands/", json.dumps(body), content_type="application/json")
    assert resp.status_code == 202, resp.content
    return resp.json()["id"]


def test_each_run_has_its_own_key_and_another_runs_key_is_refused(runs, operator, redis_client, trainers, until,
                                                                  capsys, settings):
    key_a, key_b = _key_of(A, capsys), _key_of(B, capsys)
    assert key_a != key_b and settings.OBS_CONTROL_KEY not in (key_a, key_b)
    assert key_a == contract.run_control_key(settings.OBS_CONTROL_KEY, A)
    trainers(A, key_a), trainers(B, key_b)
    # the panel signs each run's commands with that run's key: both trainers accept theirs
    for run_id in (A, B):
        cid = _send(operator, run_id, command="pause", reason="look")
        assert _final(redis_client, run_id, cid, until)["status"] == "accepted"
    # whoever holds run A's key (its trainer host, its CLI users) cannot steer run B
    fields = contract.command_fields("cross-0000001", "pause", {}, "from A's host", "mallory")
    redis_client.xadd(contract.control_stream(B), contract.sign_command(B, fields, key_a))
    ack = _final(redis_client, B, "cross-0000001", until)
    assert ack["status"] == "rejected" and f"not signed with run {B}'s control key" in ack["detail"], ack
    # nor does a command signed for A, copied onto B's stream, pass (the run id is signed)
    fields = contract.command_fields("cross-0000002", "pause", {}, "copied", "mallory")
    redis_client.xadd(contract.control_stream(B), contract.sign_command(A, fields, key_a))
    assert _final(redis_client, B, "cross-0000002", until)["status"] == "rejected"
    # the master itself is not a run key
    fields = contract.command_fields("cross-0000003", "pause", {}, "master", "mallory")
    redis_client.xadd(contract.control_stream(B), contract.sign_command(B, fields, settings.OBS_CONTROL_KEY))
    assert _final(redis_client, B, "cross-0000003", until)["status"] == "rejected"


def test_rotating_one_runs_key_leaves_the_others_untouched(runs, operator, redis_client, trainers, until, capsys):
    old_a, key_b = _key_of(A, capsys), _key_of(B, capsys)
    call_command("control_key", A, "--rotate")
    new_a = capsys.readouterr().out.strip().split("=", 1)[1].encode()
    assert new_a != old_a and _key_of(B, capsys) == key_b and _key_of(A, capsys) == new_a
    stale = trainers(A, old_a)  # A's trainer not yet restarted with its new key: it refuses what the panel signs now
    cid = _send(operator, A, command="pause", reason="after the rotation")
    ack = _final(redis_client, A, cid, until)
    assert ack["status"] == "rejected" and "bad signature" in ack["detail"]
    stale.close()
    redis_client.delete(contract.control_stream(A))
    trainers(A, new_a)  # restarted with the new key
    cid = _send(operator, A, command="pause", reason="with the new key")
    assert _final(redis_client, A, cid, until)["status"] == "accepted"
    trainers(B, key_b)  # B was never touched
    cid = _send(operator, B, command="pause", reason="B as before")
    assert _final(redis_client, B, cid, until)["status"] == "accepted"
    # the operator's log of B lists it, as ever
    assert cid in {c["id"] for c in operator.get(f"/api/runs/{B}/commands/").json()["commands"]}


@pytest.mark.slow
def test_the_cli_signs_with_the_run_key_it_is_given(runs, redis_client, redis_url, trainers, until, capsys):
    key_a = _key_of(A, capsys)
    trainers(A, key_a), trainers(B, _key_of(B, capsys))
    redis_client.sadd(contract.RUNS_KEY, A, B)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OBS_CONTROL_KEY")}
    env.update({contract.RUN_CONTROL_KEY_ENV: key_a.decode(), "REDIS_URL": redis_url, "PYTHONPATH": str(ROOT)})

    def cli(run_id, cmd_id):
        return subprocess.run([sys.executable, "-m", "training", "control", run_id, "pause", "--reason", "cli",
                               "--id", cmd_id, "--timeout", "0.5"], env=env, cwd=ROOT, capture_output=True,
                              text=True, timeout=120)

    cli(A, "cli-a-0000001")
    assert _final(redis_client, A, "cli-a-0000001", until)["status"] == "accepted"
    cli(B, "cli-b-0000001")  # A's key only: B refuses it
    ack = _final(redis_client, B, "cli-b-0000001", until)
    assert ack["status"] == "rejected" and f"not signed with run {B}'s control key" in ack["detail"]
