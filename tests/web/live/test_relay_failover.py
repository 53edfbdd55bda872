"""The push tier's failures: a relay killed between its publish and its cursor write (two relays), a run started
while no relay runs, nginx frozen under a live run, and /healthz saying the live path's lag apart from ingest's.
Real Redis, real nginx + nchan, the real database; the viewer counts the live log's numbers as they come."""

from __future__ import annotations

import json
import signal
import threading
import time

import psutil
import pytest

from observatory.streams.nchan import NchanPublisher, PushError
from tests.support import stop, wait_for
from webapp.live.livelog import log_key
from webapp.live.relay import Relay, cursor_key, lease_key
from webapp.metrics.models import Point

from .test_relay import FROM_START, ingest, nchan, relay_all  # noqa: F401  (fixtures)

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_killed_relays_runs_are_taken_over_with_no_hole_and_no_repeat(redis_client, nchan, trainer, ingest,
                                                                         run_id):
    """Two relays; the one holding the run dies without a word (as kill -9: no close, its lease left to expire)
    right after publishing an entry it could not record. The other takes the run over once the lease expires,
    resumes after the recorded cursor, sees on nchan that the unrecorded entry is out already, and goes on: the
    viewer gets every number once."""
    a = Relay(redis_client, NchanPublisher(nchan.pub_url), lease_ms=600, token="relay-a")
    b = Relay(redis_client, NchanPublisher(nchan.pub_url), lease_ms=600, token="relay-b")
    trainer.metrics(0, loss=0.0)
    ingest.drain()
    a.drain()
    b.drain()
    viewer = nchan.viewer(run_id, FROM_START)
    assert run_id in a.cursors and run_id not in b.cursors  # one run, one holder
    for step in range(1, 4):
        trainer.metrics(step, loss=float(step))
        ingest.drain()
    a._save = lambda **kw: 0  # noqa: SLF001  (dies between nchan's answer and recording its cursor)
    a.step(50)
    t0 = time.monotonic()
    wait_for(lambda: b.step(50) >= 0 and run_id in b.cursors, 10, "relay b to take the run over")
    took = time.monotonic() - t0
    for step in range(4, 8):
        trainer.metrics(step, loss=float(step))
    relay_all(b, ingest)
    viewer.read_until(lambda: 7 in viewer.points.get("loss", {}), "step 7")
    assert viewer.received["loss"] == list(range(8))
    assert viewer.seqs == list(range(viewer.seqs[0], viewer.seqs[0] + len(viewer.seqs))), viewer.seqs
    assert took < 5.0
    b.close()
    viewer.close()


def test_a_run_started_while_no_relay_runs_is_delivered_from_its_first_step(redis_client, nchan, trainer, ingest,
                                                                            run_id):
    for step in range(5):
        trainer.metrics(step, loss=float(step))
    ingest.drain()
    relay = Relay(redis_client, NchanPublisher(nchan.pub_url))
    relay.drain()
    viewer = nchan.viewer(run_id, FROM_START)
    viewer.read_until(lambda: 4 in viewer.points.get("loss", {}), "step 4")
    assert viewer.received["loss"] == list(range(5))
    relay.close()
    viewer.close()


def test_healthz_reports_the_live_paths_lag_apart_from_ingests(redis_client, nchan, trainer, ingest, run_id, client,
                                                              settings):
    settings.OBS_LIVE_PUSH_URL = nchan.pub_url
    relay = Relay(redis_client, NchanPublisher(nchan.pub_url))
    trainer.metrics(0, loss=1.0)
    relay_all(relay, ingest)
    body = client.get("/healthz").json()
    assert (body["ingest_lag"], body["live_lag"]) == ("ok", "ok")
    published = redis_client.xlen(log_key(run_id))
    relay.close()  # the push tier's relays are gone; ingest goes on
    for step in range(1, 40):  # one entry each
        trainer.metrics(step, loss=1.0)
        ingest.drain()
    body = client.get("/healthz").json()
    assert (body["status"], body["ingest_lag"], body["live_lag"]) == ("ok", "ok", f"no relay holds {run_id}")
    relay = Relay(redis_client, NchanPublisher(nchan.pub_url))
    relay.discover()  # holds the run again, has published nothing of what came meanwhile
    behind = redis_client.xlen(log_key(run_id)) - published
    assert behind >= 39 and client.get("/healthz").json()["live_lag"] == f"{behind} entries behind on {run_id}"
    relay.drain()
    assert client.get("/healthz").json()["live_lag"] == "ok"
    relay.close()


def test_a_frozen_push_tier_costs_ingest_nothing_and_viewers_nothing(redis_client, nchan, trainer, ingest, run_id):
    """nginx frozen (SIGSTOP) under a live run: ingest goes on appending (it never calls nchan), the relay's
    publishes time out and are tried again; after the thaw the viewer gets the backlog in order, every number once
    (a publish that timed out but that nginx took anyway is recognised by nchan's last message id)."""
    relay = Relay(redis_client, NchanPublisher(nchan.pub_url, timeout=0.5))
    for step in range(3):
        trainer.metrics(step, loss=float(step))
    relay_all(relay, ingest)
    viewer = nchan.viewer(run_id, FROM_START)
    viewer.read_until(lambda: 2 in viewer.points.get("loss", {}), "step 2")
    frozen = [psutil.Process(nchan.proc.pid), *psutil.Process(nchan.proc.pid).children()]  # master and workers
    for p in frozen:
        p.send_signal(signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        for step in range(3, 10):
            trainer.metrics(step, loss=float(step))
            ingest.drain()  # one entry each, appended at once
        ingest_s = time.monotonic() - t0
        with pytest.raises(PushError):
            relay.step(50)
    finally:
        for p in frozen:
            p.send_signal(signal.SIGCONT)
    assert ingest_s < 5.0  # no nchan timeout on ingest's thread (each would be 0.5 s here, 5 s in production)
    assert Point.objects.filter(series__run_id=run_id, series__name="loss").count() == 10
    wait_for(lambda: relay.drain() >= 0 and 9 in _published(redis_client, run_id), 20, "the relay to catch up",
             every=0.2)
    viewer.read_until(lambda: 9 in viewer.points.get("loss", {}), "step 9 after the thaw")
    assert viewer.received["loss"] == list(range(10))
    assert viewer.seqs == list(range(viewer.seqs[0], viewer.seqs[0] + len(viewer.seqs))), viewer.seqs
    relay.close()
    viewer.close()


def test_a_stopped_push_tier_costs_ingest_nothing_and_a_resuming_viewer_misses_nothing(redis_client, nchan,
                                                                                       trainer, ingest, run_id):
    """nginx exits under a live run (its buffers gone with it) and starts again: ingest goes on appending, the
    relay's publishes fail and are tried again, and a viewer that reconnects with its last message id gets the
    backlog in order: its numbers, before and after, have no hole and no repeat."""
    relay = Relay(redis_client, NchanPublisher(nchan.pub_url, timeout=0.5))
    for step in range(3):
        trainer.metrics(step, loss=float(step))
    relay_all(relay, ingest)
    viewer = nchan.viewer(run_id, FROM_START)
    upto = int(redis_client.get(cursor_key(run_id)).split(b" ")[0])  # all published: the viewer is up to date
    viewer.read_until(lambda: viewer.seqs and viewer.seqs[-1] == upto, "every published entry")
    stop(nchan.proc)
    viewer.close()
    for step in range(3, 10):  # (ingest holds no push-tier client: nothing of it can wait on nginx)
        trainer.metrics(step, loss=float(step))
        ingest.drain()
    with pytest.raises(PushError):
        relay.step(50)
    assert Point.objects.filter(series__run_id=run_id, series__name="loss").count() == 10
    nchan.start()
    wait_for(lambda: relay.drain() >= 0 and 9 in _published(redis_client, run_id), 20, "the relay to catch up",
             every=0.2)
    again = nchan.viewer(run_id, viewer.last_id)
    again.read_until(lambda: 9 in again.points.get("loss", {}), "step 9 after the restart")
    seqs = viewer.seqs + again.seqs
    assert viewer.received["loss"] + again.received["loss"] == list(range(10))
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), seqs
    relay.close()
    again.close()


def _published(client, run_id: str) -> set[int]:
    """The steps of the live log's entries up to the relays' cursor."""
    cursor = client.get(cursor_key(run_id))
    if not cursor:
        return set()
    upto = cursor.split(b" ")[0].decode()
    steps = set()
    for _id, fields in client.xrange(log_key(run_id), "-", f"{upto}-0"):
        for f in json.loads(fields[b"f"]):
            steps |= set((f.get("series") or {}).get("loss", {}).get("steps", []))
    return steps


def _freeze(nchan) -> list:
    procs = [psutil.Process(nchan.proc.pid), *psutil.Process(nchan.proc.pid).children()]  # master and workers
    for p in procs:
        p.send_signal(signal.SIGSTOP)
    return procs


def _thaw(procs) -> None:
    for p in procs:
        p.send_signal(signal.SIGCONT)


def test_a_publish_held_up_longer_than_the_lease_keeps_the_lease(redis_client, nchan, trainer, ingest, run_id):
    """The relay's leases are renewed from a thread of their own: nginx frozen through a publish for longer than the
    lease (600 ms here) costs the relay its lease neither in Redis nor in its own eyes, relay b cannot take the run
    meanwhile, and the entry goes out once, recorded, after the thaw."""
    a = Relay(redis_client, NchanPublisher(nchan.pub_url, timeout=60), lease_ms=600, token="relay-a").start()
    b = Relay(redis_client, NchanPublisher(nchan.pub_url), lease_ms=600, token="relay-b")
    try:
        trainer.metrics(0, loss=0.0)
        relay_all(a, ingest)
        viewer = nchan.viewer(run_id, FROM_START)
        trainer.metrics(1, loss=1.0)
        ingest.drain()
        published = []
        frozen = _freeze(nchan)
        try:
            stepping = threading.Thread(target=lambda: published.append(a.step(50)))
            renewals = a.stats["renewals"]
            stepping.start()
            wait_for(lambda: a.stats["renewals"] >= renewals + 5 and b.step(50) >= 0, 30,
                     "more than a lease's worth of renewals while the publish waits on nginx")
            assert stepping.is_alive() and published == []  # still waiting on nginx
            assert run_id not in b.cursors and a.holds(run_id)
        finally:
            _thaw(frozen)
        stepping.join()
        assert published[0] >= 1 and a.stats["leases_lost"] == 0
        assert redis_client.get(lease_key(run_id)) == b"relay-a"
        viewer.read_until(lambda: 1 in viewer.points.get("loss", {}), "step 1 after the thaw")
        assert viewer.received["loss"] == [0, 1]
        viewer.close()
    finally:
        a.close()
        b.close()


def test_a_relay_whose_lease_was_taken_publishes_nothing_more(redis_client, nchan, trainer, ingest, run_id):
    """Relay a stalls (its keeper stopped: no renewal) until its lease runs out and relay b takes the run: a then
    publishes nothing of the run though entries wait, and lets it go; b publishes them; the viewer gets each once.
    A lease overwritten under a live keeper is found lost by the keeper, and nothing more is published either."""
    a = Relay(redis_client, NchanPublisher(nchan.pub_url), lease_ms=600, token="relay-a").start()
    b = Relay(redis_client, NchanPublisher(nchan.pub_url), lease_ms=600, token="relay-b")
    trainer.metrics(0, loss=0.0)
    relay_all(a, ingest)
    viewer = nchan.viewer(run_id, FROM_START)
    a._stop.set()  # noqa: SLF001  (the stall: no renewal from now on)
    a._keeper.join()  # noqa: SLF001
    wait_for(lambda: b.step(50) >= 0 and run_id in b.cursors, 10, "relay b to take the run once a's lease expired")
    assert not a.holds(run_id)
    trainer.metrics(1, loss=1.0)
    ingest.drain()
    frames = a.stats["frames"]
    assert a.step(50) == 0 and a.stats["frames"] == frames
    b.drain()
    viewer.read_until(lambda: 1 in viewer.points.get("loss", {}), "step 1 from relay b")
    a.close()
    a = Relay(redis_client, NchanPublisher(nchan.pub_url), lease_ms=600, token="relay-a").start()
    b.close()  # the run goes back to a
    wait_for(lambda: a.step(50) >= 0 and run_id in a.cursors, 10, "relay a to take the run back")
    redis_client.set(lease_key(run_id), "relay-c")  # taken under a's live keeper
    wait_for(lambda: run_id in a.lost or run_id not in a.cursors, 10, "a's keeper to find its lease taken")
    trainer.metrics(2, loss=2.0)
    ingest.drain()
    frames = a.stats["frames"]
    assert a.step(50) == 0 and a.stats["frames"] == frames and run_id not in a.cursors
    assert a.stats["leases_lost"] == 1
    assert viewer.received["loss"] == [0, 1]
    assert viewer.seqs == list(range(viewer.seqs[0], viewer.seqs[0] + len(viewer.seqs))), viewer.seqs
    a.close()
    viewer.close()
