"""The WebSocket consumer over the real ASGI app, reading the runs' live logs in real Redis."""

import asyncio
import json

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator

from observatory import contract
from webapp.asgi import application
from webapp.live.pipeline import LiveIngest
from webapp.live.push import LivePublisher

pytestmark = pytest.mark.django_db(transaction=True)
ORIGIN = [(b"origin", b"http://127.0.0.1:8000")]


def _connect(run_id, headers=ORIGIN):
    return WebsocketCommunicator(application, f"/ws/runs/{run_id}/", headers=headers)


async def _open(run_id):
    comm = _connect(run_id)
    connected, _ = await comm.connect(timeout=5)
    assert connected
    hello = await comm.receive_json_from(timeout=5)
    assert hello["type"] == "hello" and hello["run"]["id"] == run_id
    return comm


async def _drain(ingestor):
    return await database_sync_to_async(ingestor.drain)()


async def _until(comm, kind, timeout=5, has=None):
    """The next frame of `kind` (carrying series `has`, when given: a state-only update may come first). Frames
    that piled up between two sends arrive as one list (webapp/live/hub.py): each is looked at in order."""
    while True:
        msg = await comm.receive_json_from(timeout=timeout)
        for frame in msg if isinstance(msg, list) else [msg]:
            if frame["type"] == kind and (has is None or has in frame.get("series", {})):
                return frame


async def test_it_closes_an_unknown_run_with_4404(redis_client):
    comm = _connect("no-such-run")
    connected, _ = await comm.connect(timeout=5)
    assert connected
    out = await comm.receive_output(timeout=5)
    assert out["type"] == "websocket.close" and out["code"] == 4404


async def test_it_refuses_a_client_without_an_origin_header(redis_client):
    comm = _connect("whatever", headers=[])
    connected, _ = await comm.connect(timeout=5)
    assert not connected


async def test_it_pushes_ingested_points_to_the_browser(trainer, redis_client, run_id):
    trainer.send("run", name="ws", config={})
    publisher = LivePublisher()
    ingestor = LiveIngest(redis_client, publisher.send, consumer="ws-test", interval=0.0)
    try:
        await _drain(ingestor)
        comm = await _open(run_id)
        for step in range(5):
            trainer.metrics(step, **{contract.M_LOSS: 1.0 / (step + 1)})
        trainer.metrics(5, **{contract.M_LOSS: float("nan")})
        await _drain(ingestor)
        update = await _until(comm, "update", has=contract.M_LOSS)
        loss = update["series"][contract.M_LOSS]
        assert loss["steps"] == [0, 1, 2, 3, 4, 5]
        assert loss["values"][5] is None and loss["nonfinite"] == [[5, "NaN"]]
        if "new_series" not in update:  # points go before the write; what storage made follows it
            update = await _until(comm, "update")
        assert update["new_series"] == [contract.M_LOSS]
        await comm.disconnect()
    finally:
        await asyncio.get_running_loop().run_in_executor(None, publisher.close)


async def test_resume_backfills_from_the_database_then_streams_without_gap_or_duplicate(trainer, ingestor, run_id):
    for step in range(10):
        trainer.metrics(step, **{contract.M_LOSS: float(step), "other": 1.0})
    await _drain(ingestor)
    comm = await _open(run_id)
    await comm.send_json_to({"type": "resume", "metrics": [contract.M_LOSS], "after_step": 6})
    backfill = await _until(comm, "backfill")
    assert backfill["series"] == {contract.M_LOSS: {"steps": [7, 8, 9], "values": [7.0, 8.0, 9.0],
                                                    "nonfinite": []}}
    assert backfill["truncated"] == []
    await comm.disconnect()


async def test_live_updates_carry_only_subscribed_series_after_resume(trainer, redis_client, run_id):
    trainer.metrics(0, **{contract.M_LOSS: 1.0, "other": 2.0})
    publisher = LivePublisher()
    ingestor = LiveIngest(redis_client, publisher.send, consumer="ws-test", interval=0.0)
    try:
        await _drain(ingestor)
        comm = await _open(run_id)
        await comm.send_json_to({"type": "resume", "metrics": [contract.M_LOSS], "after": {contract.M_LOSS: 0}})
        await _until(comm, "backfill")
        trainer.metrics(1, **{contract.M_LOSS: 1.0, "other": 2.0})
        await _drain(ingestor)
        update = await _until(comm, "update")
        assert list(update["series"]) == [contract.M_LOSS]
        await comm.disconnect()
    finally:
        await asyncio.get_running_loop().run_in_executor(None, publisher.close)


async def test_resume_replays_a_missed_rewind_and_resends_from_its_step(trainer, ingestor, run_id):
    for step in range(10):
        trainer.metrics(step, loss=1.0)
    await _drain(ingestor)
    trainer.send("rewind", from_step=9, to_step=4)
    for step in range(5, 8):
        trainer.metrics(step, loss=2.0)
    await _drain(ingestor)
    comm = await _open(run_id)
    # the client held steps 0..9 and events up to id 0 when its connection dropped
    await comm.send_json_to({"type": "resume", "metrics": ["loss"], "after_step": 9, "after_event": 0})
    backfill = await _until(comm, "backfill")
    assert backfill["rewinds"] == [{"from_step": 9, "to_step": 4}]
    assert backfill["series"]["loss"]["steps"] == [5, 6, 7]
    assert backfill["series"]["loss"]["values"] == [2.0, 2.0, 2.0]
    assert [e["kind"] for e in backfill["events"]] == ["rewind"]
    await comm.disconnect()


@pytest.mark.parametrize("frame,needle", [
    ("not json", "not JSON"),
    ("[1, 2]", "object"),
    ('{"type": "subscribe-everything"}', "unknown message type"),
    ('{"type": "resume", "after_step": "x"}', "after_step"),
    ('{"type": "resume", "metrics": ["bad name!"]}', "bad metric name"),
    ('{"type": "resume", "metrics": "loss"}', "metrics"),
    ('{"type": "resume", "after_event": -3}', "after_event"),
    ('{"type": "resume", "sneaky": 1}', "unknown fields"),
])
async def test_bad_frames_get_an_error_frame_and_the_socket_stays_open(trainer, ingestor, run_id, frame, needle):
    trainer.metrics(0, loss=1.0)
    await _drain(ingestor)
    comm = await _open(run_id)
    await comm.send_to(text_data=frame)
    err = await comm.receive_json_from(timeout=5)
    assert err["type"] == "error" and needle in err["error"]
    await comm.send_to(text_data=json.dumps({"type": "ping"}))
    assert (await comm.receive_json_from(timeout=5)) == {"type": "pong"}
    await comm.disconnect()


async def test_a_reconnect_gets_the_logs_entries_since_its_last_number_then_live_ones(trainer, redis_client, run_id):
    """live.js reconnects with ?after_seq=<the last number it holds>: the log's entries after it come first, in
    order, then live ones (a repeat of the overlap is the page's to drop); a number older than the log's resume
    window gets a "gap" frame instead of megabytes (the page refetches over HTTP)."""
    trainer.send("run", name="ws", config={})
    ingestor = LiveIngest(redis_client, LivePublisher(redis_client).send, consumer="ws-seq", interval=0.0)
    await _drain(ingestor)
    comm = await _open(run_id)
    trainer.metrics(0, **{contract.M_LOSS: 1.0})
    await _drain(ingestor)
    held = (await _until(comm, "update", has=contract.M_LOSS))["seq"]
    await comm.disconnect()
    for step in range(1, 4):  # while the page is away
        trainer.metrics(step, **{contract.M_LOSS: 1.0})
        await _drain(ingestor)
    comm = WebsocketCommunicator(application, f"/ws/runs/{run_id}/?after_seq={held}", headers=ORIGIN)
    assert (await comm.connect(timeout=5))[0]
    assert (await comm.receive_json_from(timeout=5))["type"] == "hello"
    replay = await comm.receive_json_from(timeout=5)
    assert [f["seq"] for f in replay] == [held + 1, held + 2, held + 3]
    assert [f["series"][contract.M_LOSS]["steps"] for f in replay] == [[1], [2], [3]]
    trainer.metrics(4, **{contract.M_LOSS: 1.0})
    await _drain(ingestor)
    live = []
    while not live or live[-1]["seq"] < held + 4:  # live frames, the overlap with the replay included
        msg = await comm.receive_json_from(timeout=5)
        live += [f for f in (msg if isinstance(msg, list) else [msg]) if "seq" in f]
    assert live[-1]["seq"] == held + 4 and live[-1]["series"][contract.M_LOSS]["steps"] == [4]
    assert all(held + 1 <= f["seq"] <= held + 4 for f in live)
    await comm.disconnect()
    comm = WebsocketCommunicator(application, f"/ws/runs/{run_id}/?after_seq={held - 5000}", headers=ORIGIN)
    assert (await comm.connect(timeout=5))[0]
    await comm.receive_json_from(timeout=5)
    assert await comm.receive_json_from(timeout=5) == {"type": "gap", "run_id": run_id, "seq": held + 4}
    await comm.disconnect()


async def test_live_frames_wait_for_a_new_sockets_first_resume(trainer, redis_client, run_id):
    """A frame appended between a socket's hello and its resume: sent before the backfill, it made a client that
    keeps only steps after the last it holds drop the backfill's older points (bench/chaos.py's client after a
    resync missed ten steps). It waits for the resume's backfill and comes after it."""
    from webapp.live.hub import get_hub
    from webapp.live.livelog import LiveLog

    trainer.send("run", name="ws", config={})
    for step in range(3):
        trainer.metrics(step, **{contract.M_LOSS: float(step)})
    ingestor = LiveIngest(redis_client, LivePublisher().send, consumer="ws-hold", interval=0.0)
    await _drain(ingestor)
    comm = await _open(run_id)
    seq = LiveLog(redis_client).append(run_id, [{"type": "update", "run_id": run_id, "rewinds": [], "series": {
        contract.M_LOSS: {"steps": [3], "values": [3.0], "nonfinite": []}}}])
    feed = get_hub().feeds[run_id]
    for _ in range(500):  # the hub has read it and flushed it to the socket's outbox
        if feed.last_seq == seq and not feed.queue:
            break
        await asyncio.sleep(0.01)
    assert feed.last_seq == seq and not feed.queue
    await comm.send_json_to({"type": "resume", "metrics": [contract.M_LOSS], "after": {contract.M_LOSS: -1}})
    first = await comm.receive_json_from(timeout=5)
    assert first["type"] == "backfill", first
    assert first["series"][contract.M_LOSS]["steps"] == [0, 1, 2, 3]
    update = await _until(comm, "update", has=contract.M_LOSS)
    assert update["series"][contract.M_LOSS]["steps"] == [3] and update["seq"] == seq
    await comm.disconnect()
