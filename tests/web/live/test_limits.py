"""The WebSocket's documented limits and refusals (webapp.live.protocol): each gets a clear error frame or close
code, never a 1011 or an HTTP 500."""

import json

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator

from webapp.asgi import application
from webapp.live import protocol

from ..servers import free_port

pytestmark = pytest.mark.django_db(transaction=True)
ORIGIN = [(b"origin", b"http://127.0.0.1:8000")]


async def _open(run_id):
    comm = WebsocketCommunicator(application, f"/ws/runs/{run_id}/", headers=ORIGIN)
    connected, _ = await comm.connect(timeout=5)
    assert connected
    hello = await comm.receive_json_from(timeout=5)
    assert hello["type"] == "hello" and hello["limits"]["max_resume_metrics"] == protocol.MAX_RESUME_METRICS
    return comm


async def _error(comm, text):
    await comm.send_to(text_data=text)
    msg = await comm.receive_json_from(timeout=5)
    assert msg["type"] == "error"
    return msg["error"]


async def test_a_frame_nested_thousands_deep_gets_an_error_frame_not_a_1011(trainer, ingestor, run_id):
    trainer.metrics(0, loss=1.0)
    await database_sync_to_async(ingestor.drain)()
    comm = await _open(run_id)
    assert "nested deeper" in await _error(comm, "[" * 20_000 + "]" * 20_000)
    deep = 1
    for _ in range(protocol.MAX_DEPTH + 2):  # parses fine, but deeper than any frame of the protocol
        deep = [deep]
    assert "nested deeper" in await _error(comm, json.dumps({"type": "resume", "after": {"x": deep}}))
    assert "larger than" in await _error(comm, json.dumps({"type": "ping", "pad": "x" * protocol.MAX_FRAME_BYTES}))
    await comm.send_to(text_data=json.dumps({"type": "ping"}))
    assert await comm.receive_json_from(timeout=5) == {"type": "pong"}  # still open
    await comm.disconnect()


async def test_a_resume_naming_too_many_series_is_refused(trainer, ingestor, run_id):
    trainer.metrics(0, loss=1.0)
    await database_sync_to_async(ingestor.drain)()
    comm = await _open(run_id)
    names = [f"m{i}" for i in range(protocol.MAX_RESUME_METRICS + 1)]
    assert str(protocol.MAX_RESUME_METRICS) in await _error(comm, json.dumps({"type": "resume", "metrics": names}))
    await comm.disconnect()


async def test_one_backfill_carries_at_most_its_point_budget_the_rest_is_truncated(trainer, ingestor, run_id,
                                                                                 monkeypatch):
    for step in range(10):
        trainer.metrics(step, a=1.0, b=2.0, c=3.0)
    await database_sync_to_async(ingestor.drain)()
    monkeypatch.setattr(protocol, "MAX_BACKFILL_POINTS", 12)
    comm = await _open(run_id)
    await comm.send_json_to({"type": "resume", "metrics": ["a", "b", "c"], "after_step": -1})
    bf = await comm.receive_json_from(timeout=5)
    assert bf["type"] == "backfill"
    assert sum(len(s["steps"]) for s in bf["series"].values()) <= 12
    assert bf["truncated"] == ["a", "b", "c"]  # 4 of 10 points each: reload them through the HTTP API
    assert bf["series"]["a"]["steps"] == [0, 1, 2, 3]
    await comm.disconnect()


async def test_a_client_sending_too_fast_is_closed_with_4429(trainer, ingestor, run_id):
    trainer.metrics(0, loss=1.0)
    await database_sync_to_async(ingestor.drain)()
    comm = await _open(run_id)
    for _ in range(protocol.RATE_BURST * 3):  # the bucket refills meanwhile: a wide margin, even on a busy machine
        await comm.send_to(text_data='{"type": "ping"}')
    while True:
        out = await comm.receive_output(timeout=5)
        if out["type"] == "websocket.close":
            break
    assert out["code"] == protocol.CLOSE_RATE and "per second" in out["reason"]


async def test_a_viewer_the_matrix_refuses_is_closed_with_4403(trainer, ingestor, run_id, monkeypatch):
    from webapp.accounts import permissions

    trainer.metrics(0, loss=1.0)
    await database_sync_to_async(ingestor.drain)()
    monkeypatch.setitem(permissions.MATRIX, "runs.view", frozenset({"operator"}))
    comm = WebsocketCommunicator(application, f"/ws/runs/{run_id}/", headers=ORIGIN)
    connected, _ = await comm.connect(timeout=5)
    assert connected
    out = await comm.receive_output(timeout=5)
    assert out["type"] == "websocket.close" and out["code"] == protocol.CLOSE_FORBIDDEN


async def test_a_path_outside_the_routes_is_refused_at_the_handshake_not_a_500(redis_client):
    comm = WebsocketCommunicator(application, "/ws/nothing-here/", headers=ORIGIN)
    connected, _ = await comm.connect(timeout=5)
    assert not connected


async def test_a_handshake_while_redis_is_down_closes_cleanly_with_1013(trainer, ingestor, run_id, settings):
    trainer.metrics(0, loss=1.0)
    await database_sync_to_async(ingestor.drain)()
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"  # the live log's Redis is away
    comm = WebsocketCommunicator(application, f"/ws/runs/{run_id}/", headers=ORIGIN)
    connected, _ = await comm.connect(timeout=10)
    assert connected
    out = await comm.receive_output(timeout=10)
    assert out["type"] == "websocket.close" and out["code"] == protocol.CLOSE_TRY_AGAIN


async def test_a_signed_in_viewer_is_judged_by_its_session_roles(trainer, ingestor, run_id, monkeypatch):
    from django.contrib.auth import get_user_model
    from django.test import Client

    from webapp.accounts import permissions, roles

    def operator_cookie():
        user = get_user_model().objects.create_user("op-ws", password="x" * 12)
        roles.grant(user, roles.OPERATOR)
        client = Client()
        client.force_login(user)
        return client.cookies["sessionid"].value

    trainer.metrics(0, loss=1.0)
    await database_sync_to_async(ingestor.drain)()
    cookie = await database_sync_to_async(operator_cookie)()
    monkeypatch.setitem(permissions.MATRIX, "runs.view", frozenset({roles.OPERATOR}))
    comm = WebsocketCommunicator(application, f"/ws/runs/{run_id}/",
                                 headers=[*ORIGIN, (b"cookie", f"sessionid={cookie}".encode())])
    connected, _ = await comm.connect(timeout=5)
    assert connected
    assert (await comm.receive_json_from(timeout=5))["type"] == "hello"
    await comm.disconnect()


async def test_a_socket_closed_with_4429_is_closed_once_and_reads_nothing_more(trainer, ingestor, run_id):
    """Frames already on their way after the 4429 must not close it again: a second websocket.close is what made
    uvicorn log `RuntimeError: Unexpected ASGI message 'websocket.close'`."""
    trainer.metrics(0, loss=1.0)
    await database_sync_to_async(ingestor.drain)()
    comm = await _open(run_id)
    for _ in range(protocol.RATE_BURST * 3):
        await comm.send_to(text_data='{"type": "ping"}')
    closes = []
    while not closes:
        out = await comm.receive_output(timeout=5)
        closes += [out] if out["type"] == "websocket.close" else []
    for _ in range(5):  # more frames after the close
        await comm.send_to(text_data='{"type": "ping"}')
    assert await comm.receive_nothing(timeout=0.5), "a second message after websocket.close"
    assert closes[0]["code"] == protocol.CLOSE_RATE
