"""The QA race (issue 45): an operator retried an id the trainer had undone before the web read its acks; the
trainer's refusal ack got the very stream id of the retry's control entry (two streams, one millisecond), and the
web, which counted only acks *after* the latest send, lost both the applied ack and the refusal: the record stayed
"sent" / "timeout", missing from the interventions. Acks are matched to the command by id (and by the control entry
they answer), so the first final answer stands, whatever the stream positions."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from observatory import contract
from webapp.control.models import OperatorCommand
from webapp.runs.models import RunEvent

from .conftest import RUN

pytestmark = pytest.mark.django_db
URL = f"/api/runs/{RUN}/commands/"
CMD = "race-0000001"


def _post(client, **body):
    return client.post(URL, json.dumps(body), content_type="application/json")


def _ack_at(redis_client, entry_id: str, status: str, detail: str, step=None, answers: str | None = None):
    """An ack written with the stream id `entry_id` (the trainer's XADD in the same millisecond as the send)."""
    fields = contract.ack_fields(CMD, status, detail, step, entry=answers or "")
    return redis_client.xadd(contract.ack_stream(RUN), fields, id=entry_id)


@pytest.mark.parametrize("with_entry", [True, False], ids=["acks-name-the-entry", "older-trainer-acks"])
def test_a_retry_of_an_undone_id_answered_in_the_same_millisecond_keeps_its_applied_and_undone_record(
        operator, run, redis_client, with_entry):
    assert _post(operator, id=CMD, command="set-lr-multiplier", args={"value": 0.5}, reason="calmer").status_code == 202
    first = OperatorCommand.objects.get(pk=CMD).sent_entry
    ms, _ = (int(x) for x in first.split("-"))
    # the trainer: accepted and applied it, then a rollback undid it; the web has read none of this yet
    _ack_at(redis_client, first, "accepted", "queued", answers=first if with_entry else None)
    _ack_at(redis_client, f"{ms}-1", "applied", "LR multiplier 1 -> 0.5", 41, answers=first if with_entry else None)
    RunEvent.objects.create(run=run, kind="event", name="commands_rolled_back", step=30, entry_id="5-0",
                            payload={"ids": [CMD], "by": "rb-00000001", "to_step": 30,
                                     "detail": "undone by rollback rb-00000001 to step 30"})
    redis_client.xadd(contract.control_stream(RUN), {"note": "filler"}, id=f"{ms}-2")  # the retry comes after both
    # the operator retries: the record still says "sent", so it goes on the stream again
    again = _post(operator, id=CMD, command="set-lr-multiplier", args={"value": 0.5}, reason="calmer")
    assert again.status_code == 202
    retry = [e for e, f in redis_client.xrange(contract.control_stream(RUN))][-1].decode()
    # the trainer refuses the undone id; its ack lands with the retry entry's very id (different stream)
    _ack_at(redis_client, retry, "rejected", f"id {CMD} was undone by rollback rb-00000001; send it again with a new "
            "id", 42, answers=retry if with_entry else None)
    public = {c["id"]: c for c in Client().get(f"/api/runs/{RUN}/interventions/").json()["interventions"]}
    assert CMD in public, "an undone command dropped out of the interventions"
    assert public[CMD]["outcome"] == "undone" and public[CMD]["step"] == 41
    assert public[CMD]["undone_by"] == "rb-00000001"
    page = Client().get(f"/runs/{RUN}/log/").content.decode()
    assert "rb-00000001" in page and "timeout" not in page.lower() and "no answer" not in page.lower()
    recorded = {c["id"]: c for c in operator.get(URL).json()["commands"]}[CMD]  # the operator path records it
    assert (recorded["outcome"], recorded["status"], recorded["step"]) == ("undone", "applied", 41)
    assert recorded["detail"] == "LR multiplier 1 -> 0.5"
    public_after = {c["id"]: c for c in Client().get(f"/api/runs/{RUN}/interventions/").json()["interventions"]}
    assert public_after[CMD] == public[CMD]
