"""Writes reach open dashboards as `annotation` frames, through the real ASGI app, live consumer and Redis layer;
frames carry references (ids, versions, counts), never what a user wrote; a hide sends no content to the public."""

from __future__ import annotations

import json

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator

from webapp.asgi import application

from .conftest import RUN, create, post

pytestmark = pytest.mark.django_db(transaction=True)
ORIGIN = [(b"origin", b"http://127.0.0.1:8000")]


async def _next(comm, kind, timeout=5):
    """The next frame of type `kind` (frames may come one by one or as a batch, a list)."""
    while True:
        msg = await comm.receive_json_from(timeout=timeout)
        for frame in msg if isinstance(msg, list) else [msg]:
            if frame.get("type") == kind:
                return frame


async def test_create_reply_and_hide_are_pushed_to_every_viewer(run, personas, redis_client):
    comm = WebsocketCommunicator(application, f"/ws/runs/{RUN}/", headers=ORIGIN)
    connected, _ = await comm.connect(timeout=5)
    assert connected
    assert (await comm.receive_json_from(timeout=5))["type"] == "hello"

    a = (await database_sync_to_async(create)(personas["member"], title="node 3 restarted")).json()
    frame = await _next(comm, "annotation")
    assert {k: frame[k] for k in ("run_id", "event", "id", "version", "reply_count")} == (
        {"run_id": RUN, "event": "upsert", "id": a["id"], "version": a["created_at"], "reply_count": 0})
    assert "node 3" not in json.dumps(frame)

    r = (await database_sync_to_async(post)(personas["operator"], f"/api/annotations/{a['id']}/replies/",
                                            {"body": "confirmed"})).json()
    frame = await _next(comm, "annotation")
    assert (frame["event"], frame["annotation_id"], frame["id"], frame["reply_count"]) == ("reply", a["id"], r["id"], 1)
    assert "confirmed" not in json.dumps(frame)

    await database_sync_to_async(post)(personas["member"], f"/api/annotations/{a['id']}/reactions/",
                                       {"kind": "+1"})
    frame = await _next(comm, "annotation")
    assert (frame["event"], frame["target"], frame["id"], frame["reactions"]) == (
        "reactions", "annotation", a["id"], {"+1": 1})

    await database_sync_to_async(post)(personas["moderator"], f"/api/annotations/{a['id']}/moderation/",
                                       {"action": "hide", "reason": "off topic"})
    frame = await _next(comm, "annotation")
    assert {k: v for k, v in frame.items() if k != "seq"} == {"type": "annotation", "run_id": RUN, "event": "remove",
                                                              "id": a["id"], "reason": "hidden"}
    await comm.disconnect()


async def test_a_refused_write_pushes_nothing(run, personas, redis_client):
    comm = WebsocketCommunicator(application, f"/ws/runs/{RUN}/", headers=ORIGIN)
    assert (await comm.connect(timeout=5))[0]
    await comm.receive_json_from(timeout=5)
    assert (await database_sync_to_async(create)(personas["member"], step_start=5000)).status_code == 400
    good = (await database_sync_to_async(create)(personas["member"], title="ok")).json()
    frame = await _next(comm, "annotation")  # the first frame is the good write's
    assert frame["id"] == good["id"]
    await comm.disconnect()
