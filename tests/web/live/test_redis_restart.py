"""A Redis crash under a live run (bench/chaos.py's first fault, as a test): Redis killed -9 and started again,
empty (nothing on disk) or from its append-only file (the last second lost). Ingest must go on storing what the
trainer publishes after it, the live log must go on with numbers above every number a viewer saw (never the same
number for other frames), and the web's hub must read the log again and bring its viewers the new steps.
Real processes: redis-server, `manage.py ingest`, the web server (uvicorn); a WebSocket viewer that resumes."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest

from observatory import contract
from tests.support import PrivateRedis, wait_for
from webapp.live.livelog import log_key, seq_of
from webapp.metrics.models import Point

from ..conftest import Trainer
from ..servers import Servers

pytestmark = pytest.mark.django_db(transaction=True)


class Viewer(threading.Thread):
    """A hub socket on the run, reconnecting and resuming after the last step it holds (as bench/chaos.py's)."""

    def __init__(self, url: str, run_id: str):
        super().__init__(daemon=True)
        self.url = url.replace("http://", "ws://") + f"/ws/runs/{run_id}/"
        self.origin = url
        self.steps: set[int] = set()
        self.seqs: list[int] = []
        self.stop = threading.Event()

    def run(self):
        asyncio.run(self._main())

    async def _main(self):
        import websockets

        while not self.stop.is_set():
            try:
                async with websockets.connect(self.url, origin=self.origin, open_timeout=5) as ws:
                    await ws.send(json.dumps({"type": "resume", "metrics": ["loss"],
                                              "after": {"loss": max(self.steps, default=-1)}}))
                    while not self.stop.is_set():
                        try:
                            raw = await asyncio.wait_for(ws.recv(), 0.2)
                        except asyncio.TimeoutError:
                            continue
                        got = json.loads(raw)
                        for f in got if isinstance(got, list) else [got]:
                            if f.get("type") == "update" and "seq" in f:
                                self.seqs.append(f["seq"])
                            if f.get("type") in ("update", "backfill"):
                                self.steps.update(f.get("series", {}).get("loss", {}).get("steps", []))
            except Exception:  # refused or closed (a resync): reconnect, as a browser does
                await asyncio.sleep(0.2)


def _stored(run_id: str) -> set[int]:
    return set(Point.objects.filter(series__run_id=run_id, series__name="loss").values_list("step", flat=True))


@pytest.mark.parametrize("aof", [False, True], ids=["empty", "append-only-file"])
def test_ingest_and_the_live_log_and_the_hub_go_on_after_redis_is_killed_and_restarted(live_env, tmp_path, run_id,
                                                                                        aof):
    redis_server = PrivateRedis(tmp_path / "redis", appendonly=aof)
    (tmp_path / "redis").mkdir()
    client = redis_server.start()
    servers = Servers({**live_env, "REDIS_URL": redis_server.url})
    viewer = None
    try:
        trainer = Trainer(client, run_id)
        trainer.send("run", name="restart", config={})
        trainer.metrics(0, loss=0.0)
        wait_for(lambda: _stored(run_id) == {0}, 60, "step 0 in the database")
        servers.wait_web()
        viewer = Viewer(servers.url, run_id)
        viewer.start()
        step = 1

        def publish_until(cond, what):
            nonlocal step

            def once():
                nonlocal step
                trainer.metrics(step, loss=float(step))
                step += 1
                return cond()
            wait_for(once, 60, what, every=0.05)

        publish_until(lambda: {1, 2} <= viewer.steps, "the viewer to see live steps before the crash")
        before = step
        given = {seq_of(i): f for i, f in client.xrange(log_key(run_id))}  # every number given so far
        redis_server.stop(kill=True)
        client = redis_server.start()
        trainer = Trainer(client, run_id)  # the trainer's publisher registers the run again on its new connection
        publish_until(lambda: set(range(before, before + 3)) <= _stored(run_id),
                      "ingest to store the steps published after the restart")
        publish_until(lambda: set(range(before, before + 3)) <= viewer.steps,
                      "the hub's viewer to see the steps published after the restart")
        # a number given before the crash means the same frames after it (the log may have lost its tail, never
        # given a number again to other frames): a viewer that saw it must not drop new frames as a repeat
        reused = [s for i, f in client.xrange(log_key(run_id)) if (s := seq_of(i)) in given and given[s] != f]
        assert reused == [], f"{len(reused)} numbers given again to other frames"
        assert viewer.seqs == sorted(viewer.seqs)
        assert not client.hgetall(contract.DEADLETTER_COUNT_KEY)
        assert "Timeout" not in servers.tail("web", 20_000), servers.tail("web")
    finally:
        if viewer is not None:
            viewer.stop.set()
        servers.close()
        redis_server.stop()


def test_a_log_that_lost_its_tail_in_a_restart_never_gives_a_number_twice(tmp_path, run_id):
    """An append-only file fsynced every second loses up to a second of appends when the host dies: the log comes
    back without its newest entries (here: deleted after a kill -9 + restart, which keeps what the kernel had).
    Numbering on from the last kept entry would give a viewer's numbers to other frames, which it then drops as
    repeats; the first append after the restart numbers from the clock instead (a hole: the viewer refetches)."""
    from webapp.live.livelog import LiveLog

    server = PrivateRedis(tmp_path, appendonly=True)
    try:
        client = server.start()
        given = [LiveLog(client).append(run_id, [{"type": "update", "step": i}]) for i in range(5)]
        assert given == list(range(given[0], given[0] + 5))
        server.stop(kill=True)
        client = server.start()
        client.xdel(log_key(run_id), *(f"{s}-0" for s in given[3:]))  # the lost second, as it loads:
        # the stream's last id is its last kept entry's
        client.execute_command("XSETID", log_key(run_id), f"{given[2]}-0")
        again = LiveLog(client).append(run_id, [{"type": "update", "step": 5}])
        assert again > given[-1]
        assert LiveLog(client).append(run_id, [{"type": "update", "step": 6}]) == again + 1  # then by one again
        server.stop(kill=True)
        client = server.start()  # a restart that lost nothing: a hole all the same (cheap, and safe)
        assert LiveLog(client).append(run_id, [{"type": "update", "step": 7}]) > again + 1
    finally:
        server.close()


def test_a_streaming_run_leaves_only_its_last_batch_unacknowledged(trainer, redis_client, run_id):
    """Ingest appends a batch's points before its write and what storage made of it (the summary, events) with the
    next batch's points: only the entries whose changes wait for that are unacknowledged. Acknowledging nothing
    while a run streams made the pending list grow with the run, and a successor replayed the whole run."""
    from webapp.live.pipeline import LiveIngest

    sent = []
    live = LiveIngest(redis_client, lambda run, *bodies: sent.append(bodies), consumer="acks", early_points=True)
    trainer.send("run", name="acks", config={})
    for step in range(30):
        trainer.metrics(step, loss=float(step))
        live.step(1)
    wait_for(lambda: live.step(1) == 0 and _stored(run_id) == set(range(30)), 15, "30 steps stored")
    assert redis_client.xpending(trainer.stream, contract.INGEST_GROUP)["pending"] <= 2
    live.close()


async def test_a_backfill_holds_the_points_appended_to_the_log_before_their_commit(redis_client, run_id):
    """A socket joins the hub's reader of the log after an entry whose points are not committed yet (ingest
    appends them before its SQL write) and resumes from the database: the backfill carries them, or the viewer
    would never see that step (bench/chaos.py's client missed one this way)."""
    from channels.testing import WebsocketCommunicator

    from webapp.asgi import application
    from webapp.live.livelog import LiveLog
    from webapp.runs.models import Run

    await Run.objects.acreate(id=run_id, name="tail")
    LiveLog(redis_client).append(run_id, [{"type": "update", "run_id": run_id, "rewinds": [], "series": {
        "loss": {"steps": [0, 1], "values": [1.0, 0.5], "nonfinite": []}}}])
    comm = WebsocketCommunicator(application, f"/ws/runs/{run_id}/", headers=[(b"origin", b"http://127.0.0.1:8000")])
    assert (await comm.connect(timeout=5))[0]
    assert (await comm.receive_json_from(timeout=5))["type"] == "hello"
    await comm.send_json_to({"type": "resume", "metrics": ["loss"], "after": {"loss": -1}})
    while (frame := await comm.receive_json_from(timeout=5))["type"] != "backfill":
        pass
    assert frame["series"]["loss"]["steps"] == [0, 1] and frame["series"]["loss"]["values"] == [1.0, 0.5]
    await comm.disconnect()


async def test_the_hubs_reads_survive_a_redis_restart_and_a_quiet_log(tmp_path, run_id, settings):
    """The hub's client: a pooled connection that a Redis restart closed is replaced on its next read (a resume's
    read of the log failed with "Connection closed by server" and the socket died with a server error), and a
    blocking read of a quiet log is not cut by the socket timeout (redis-py's default is as long as the block)."""
    from webapp.live import hub as hub_mod

    server = PrivateRedis(tmp_path)
    try:
        client = server.start()
        settings.REDIS_URL = server.url
        hub = hub_mod.Hub()
        assert await hub.redis.xrevrange(log_key(run_id), count=1) == []
        server.stop(kill=True)
        client = server.start()
        client.xadd(log_key(run_id), {"f": "[]"}, id="5-0")
        assert [e[0] for e in await hub.redis.xrevrange(log_key(run_id), count=1)] == [b"5-0"]
        assert await hub.redis.xread({log_key(run_id): "5-0"}, block=hub_mod.READ_BLOCK_MS) == []  # quiet: no error
        await hub.redis.aclose()
    finally:
        server.close()
