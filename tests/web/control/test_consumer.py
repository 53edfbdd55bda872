"""The operator panel's WebSocket: operators get snapshots as state changes; anyone else is closed with 4403."""

from __future__ import annotations

import json

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import AnonymousUser

from observatory import contract
from webapp.control.consumers import CLOSE_FORBIDDEN, OperateConsumer
from webapp.control.models import OperatorCommand

from ..accounts.conftest import make_user
from .conftest import RUN

pytestmark = pytest.mark.django_db(transaction=True)


async def _connect(user):
    comm = WebsocketCommunicator(OperateConsumer.as_asgi(), "/ws/operate/")
    comm.scope["user"] = user
    connected, _ = await comm.connect()
    assert connected
    return comm


async def test_an_operator_sees_a_command_move_along_its_acks(run, redis_client):
    op = await database_sync_to_async(make_user)("olga", "operator")
    cmd = await database_sync_to_async(OperatorCommand.objects.create)(
        id="ws-00000001", run=run, name="pause", reason="look", user=op, sent_entry="0-1")
    comm = await _connect(op)
    first = json.loads(await comm.receive_from(timeout=10))
    assert first["type"] == "snapshot" and first["runs"][0]["id"] == RUN
    assert first["commands"][0]["outcome"] == "sent"
    redis_client.xadd(contract.ack_stream(RUN), contract.ack_fields(cmd.id, "applied", "paused at step 40", 40))
    while True:  # each change is pushed (the heartbeat-free run changes only through the ack)
        frame = json.loads(await comm.receive_from(timeout=10))
        if frame["commands"][0]["outcome"] == "applied":
            break
    assert frame["commands"][0]["detail"] == "paused at step 40"
    await comm.send_to(text_data='{"type": "ping"}')
    assert json.loads(await comm.receive_from(timeout=10)) == {"type": "pong"}
    await comm.disconnect()


@pytest.mark.parametrize("who", ["anonymous", "member"])
async def test_anyone_but_an_operator_is_turned_away(run, who):
    user = AnonymousUser() if who == "anonymous" else await database_sync_to_async(make_user)("mike", "member")
    comm = await _connect(user)
    assert (await comm.receive_output(timeout=5)) == {"type": "websocket.close", "code": CLOSE_FORBIDDEN}


async def _until_frame(comm, predicate):
    while True:  # each socket gets a frame per change; the receive timeout bounds a failure
        frame = json.loads(await comm.receive_from(timeout=10))
        if predicate(frame):
            return frame


async def test_two_operators_see_each_others_commands_as_they_are_sent(run, redis_client):
    from django.test import Client

    ana = await database_sync_to_async(make_user)("ana", "operator")
    bob = await database_sync_to_async(make_user)("bob", "operator")
    sockets = [await _connect(ana), await _connect(bob)]
    for comm in sockets:
        await _until_frame(comm, lambda f: f["type"] == "snapshot")

    def send() -> int:
        client = Client()
        client.force_login(ana)
        return client.post(f"/api/runs/{RUN}/commands/", json.dumps(
            {"id": "two-0000001", "command": "checkpoint", "reason": "before the big change"}),
            content_type="application/json").status_code

    assert await database_sync_to_async(send)() == 202
    for comm in sockets:
        frame = await _until_frame(comm, lambda f: any(c["id"] == "two-0000001" for c in f["commands"]))
        assert frame["commands"][0]["user"] == "ana" and frame["commands"][0]["reason"] == "before the big change"
    for comm in sockets:
        await comm.disconnect()


def _demote(user, how: str) -> None:
    from webapp.accounts import roles

    if how == "role revoked":
        roles.revoke(user, roles.OPERATOR)
    elif how == "deactivated":
        user.is_active = False
        user.save(update_fields=["is_active"])
    else:  # a superuser counts as an operator only while staff and superuser
        user.is_staff = user.is_superuser = False
        user.save(update_fields=["is_staff", "is_superuser"])


@pytest.mark.parametrize("how", ["role revoked", "deactivated", "superuser removed"])
async def test_a_demoted_operator_is_closed_with_the_code_the_page_knows(run, settings, how):
    settings.OBS_OPERATOR_RECHECK_S = 0.2
    user = await database_sync_to_async(make_user)("olga", *(() if how == "superuser removed" else ("operator",)))
    if how == "superuser removed":
        user.is_staff = user.is_superuser = True
        await database_sync_to_async(user.save)()
    comm = await _connect(user)
    assert json.loads(await comm.receive_from(timeout=10))["type"] == "snapshot"
    await database_sync_to_async(_demote)(user, how)
    while True:  # snapshots may still come until the next re-check; the receive timeout bounds a failure
        out = await comm.receive_output(timeout=10)
        if out["type"] == "websocket.close":
            break
        assert out["type"] == "websocket.send"
    assert out == {"type": "websocket.close", "code": CLOSE_FORBIDDEN}
