"""Public reads never write: a run's command log and its interventions show each command's outcome as it stands
now (the trainer's acks, commands sent from a shell, undo events, all read from Redis and SQL) without a single
INSERT, UPDATE or DELETE, for anonymous visitors and signed-in members alike. Recording them is the operator
paths' job (the panel, a send), which still does it."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from observatory import contract
from webapp.control.models import OperatorCommand
from webapp.runs.models import RunEvent

from ..accounts.conftest import make_user
from .conftest import RUN

WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE")
PUBLIC_PAGES = ["/", "/runs/", "/api/front/", "/api/runs/", f"/runs/{RUN}/", f"/api/runs/{RUN}/",
                f"/api/runs/{RUN}/events/",
                f"/runs/{RUN}/log/", f"/api/runs/{RUN}/interventions/", f"/api/v1/runs/{RUN}/interventions/",
                f"/runs/{RUN}/anomalies/", f"/api/runs/{RUN}/anomalies/", f"/api/runs/{RUN}/annotations/",
                f"/compare/?runs={RUN}", "/experiments/"]


def _writes(client, path) -> list[str]:
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(path).status_code == 200, path
    return [q["sql"] for q in ctx.captured_queries if q["sql"].lstrip().upper().startswith(WRITES)]


@pytest.fixture
def outcomes_only_redis_knows(run, redis_client, fake_trainer):
    """Three outcomes the database does not hold yet: an ack, a command sent from a shell, a rollback's undo."""
    OperatorCommand.objects.create(id="pub-0000001", run=run, name="pause", reason="look at the spike",
                                   sent_entry="1-0")
    fake_trainer.ack("pub-0000001", "applied", "paused at step 40", 40)
    fields = contract.command_fields("cli-0000001", "checkpoint", {}, "from a shell", "ana")
    key = contract.load_run_control_key(RUN)
    redis_client.xadd(contract.control_stream(RUN), contract.sign_command(RUN, fields, key))
    OperatorCommand.objects.create(id="lr-00000001", run=run, name="set-lr-multiplier", args={"value": 0.5},
                                   reason="calmer", status="applied", step=30, sent_entry="2-0")
    RunEvent.objects.create(run=run, kind="event", name="commands_rolled_back", step=20, entry_id="9-0",
                            payload={"ids": ["lr-00000001"], "by": "rb-00000001", "to_step": 20,
                                     "detail": "undone by rollback rb-00000001 to step 20"})


@pytest.mark.parametrize("who", ["anonymous", "member"])
def test_the_command_log_and_interventions_are_up_to_date_and_write_nothing(outcomes_only_redis_knows, who):
    client = Client()
    if who == "member":
        client.force_login(make_user("mike", "member"))
    for path in (f"/runs/{RUN}/log/", f"/api/runs/{RUN}/interventions/", f"/api/v1/runs/{RUN}/interventions/"):
        assert _writes(client, path) == [], path
    got = {c["id"]: c for c in client.get(f"/api/runs/{RUN}/interventions/").json()["interventions"]}
    assert got["pub-0000001"]["outcome"] == "applied" and got["pub-0000001"]["step"] == 40
    assert got["lr-00000001"]["outcome"] == "undone" and got["lr-00000001"]["undone_by"] == "rb-00000001"
    page = client.get(f"/runs/{RUN}/log/").content.decode()
    assert "from a shell" in page and "paused at step 40" in page and "rb-00000001" in page
    assert OperatorCommand.objects.get(pk="pub-0000001").status == "sent"  # nothing was recorded by the reads
    assert not OperatorCommand.objects.filter(pk="cli-0000001").exists()


def test_the_operator_panel_still_records_what_it_sees(outcomes_only_redis_knows, operator):
    assert operator.get("/api/operate/").status_code == 200
    assert OperatorCommand.objects.get(pk="pub-0000001").status == "applied"
    assert OperatorCommand.objects.get(pk="cli-0000001").source == "cli"
    assert OperatorCommand.objects.get(pk="lr-00000001").undone_by == "rb-00000001"


@pytest.mark.parametrize("path", PUBLIC_PAGES)
def test_no_public_page_of_a_run_writes(outcomes_only_redis_knows, path):
    assert _writes(Client(), path) == []


def test_a_refused_replay_does_not_change_what_the_public_log_shows(outcomes_only_redis_knows, fake_trainer):
    fake_trainer.ack("pub-0000001", "rejected", "replayed: id pub-0000001 was already applied", 41)
    got = {c["id"]: c for c in Client().get(f"/api/runs/{RUN}/interventions/").json()["interventions"]}
    assert got["pub-0000001"]["outcome"] == "applied" and got["pub-0000001"]["step"] == 40
    assert "already applied" not in Client().get(f"/runs/{RUN}/log/").content.decode()


def test_the_front_page_tells_interventions_with_their_reasons_linking_to_their_step(outcomes_only_redis_knows):
    got = {m["id"]: m for m in Client().get("/api/front/").json()["moments"] if m["kind"] == "intervention"}
    assert set(got) == {"pub-0000001", "lr-00000001"}  # applied ones (undone too); the shell's is not acked
    pause = got["pub-0000001"]
    assert pause["detail"] == "look at the spike" and pause["step"] == 40 and pause["title"] == "pause"
    assert pause["url"].startswith(f"/runs/{RUN}/?from=20&to=60")
    assert got["lr-00000001"]["title"] == "set-lr-multiplier (undone)"
