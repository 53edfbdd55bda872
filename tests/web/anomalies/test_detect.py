"""Ingest runs the detectors on every stored point: the same anomalies as the scanner, once each across restarts
and re-deliveries, superseded by rewinds, pushed as "anomaly" frames; a timer finds stalls and lost heartbeats."""

from __future__ import annotations

import time

import pytest

from observatory import contract
from observatory.anomalies.scan import scan_rows
from webapp.anomalies.detect import DETECTION
from webapp.anomalies.models import Anomaly, DetectorState
from webapp.runs.models import Run

from . import curves

pytestmark = pytest.mark.django_db(transaction=True)


def expected(data):
    return curves.scanned(a for _, a in scan_rows((None, s, v, None) for s, v, _ in data))


def frames(pushed, kind="anomaly"):
    return [body for _, body in pushed if body.get("type") == kind]


def test_ingest_finds_what_the_scanner_finds_and_pushes_frames(trainer, live_ingest, run_id):
    data = curves.rows()
    curves.publish(trainer, data)
    live_ingest.drain()
    got = curves.stored(run_id)
    assert got == expected(data)
    kinds = {k for k, *_ in got}
    assert {"loss_spike", "nonfinite", "grad_norm_spike"} <= kinds
    pushed = [a for f in frames(live_ingest.pushed) for a in f["anomalies"]]
    assert {a["key"] for a in pushed} == set(Anomaly.objects.filter(run_id=run_id).values_list("key", flat=True))
    assert all(a["event"] in ("opened", "updated", "closed") for a in pushed)
    state = DetectorState.objects.get(run_id=run_id)
    assert state.last_step == data[-1][0] and state.version >= 1


def test_a_restart_mid_stream_duplicates_nothing_and_misses_nothing(trainer, redis_client, run_id, monkeypatch):
    """Batches of 50; ingest dies after committing a batch but before its XACK (twice), and once between batches;
    snapshots of calm stretches are saved only now and then, so each restart also replays stored points."""
    from webapp.live.pipeline import LiveIngest

    data = curves.rows()
    curves.publish(trainer, data)

    def fresh(old=None):
        if old is not None:  # it died: its stream passes on with the entries it never acknowledged
            old.ingestor.leases.release(list(old.ingestor.streams))
        DETECTION.cache.clear()  # a new process: only the database remembers
        ing = LiveIngest(redis_client, lambda run, *bodies: None, consumer="ingest-a", batch=50, interval=0.0)
        ing.ingestor.renew()
        ing.ingestor.discover()
        return ing

    from webapp.anomalies import detect

    monkeypatch.setattr(detect, "SAVE_EVERY_S", 3600.0)  # calm batches stay unsaved, however slow this machine is
    replayed = DETECTION.stats["replayed"]
    ing = fresh()
    for _ in range(3):
        ing.ingestor.process(ing.ingestor.read())
        ing.flush(force=True)  # pushed, then acknowledged
    for _ in range(2):  # commit (and run the hook), then die before the XACK
        batch = ing.ingestor.read()
        ing.ingestor._write([(s, eid, contract.decode(f, expect_run=run_id)) for s, entries in batch
                             for eid, f in entries])
        ing = fresh(ing)
        assert ing.ingestor.process(ing.ingestor.read()) == 50  # the same entries again, taken over
        ing.flush(force=True)
    ing = fresh(ing)
    ing.drain()
    assert Run.objects.get(pk=run_id).last_step == data[-1][0]
    assert curves.stored(run_id) == expected(data)
    assert Anomaly.objects.filter(run_id=run_id).count() == len(expected(data))
    # calm batches are not saved one by one: the restarts fed the lost steps back from the stored points
    assert DETECTION.stats["replayed"] > replayed


def test_a_rewind_supersedes_anomalies_found_on_replaced_points(trainer, live_ingest, run_id):
    data = curves.rows()
    curves.publish(trainer, data[:560])  # both loss spikes (300, 520) and the NaN (420) are in
    live_ingest.drain()
    assert {a[2] for a in curves.stored(run_id) if a[0] == "loss_spike"} >= {300, 520}
    live_ingest.pushed.clear()
    trainer.send("rewind", from_step=559, to_step=400)  # resumed from a checkpoint at step 400
    base = data[399][1]
    calm = [(s, {**v, contract.M_LOSS: base[contract.M_LOSS], contract.domain_loss("web"):
                 base[contract.domain_loss("web")], contract.M_GRAD_NORM: 0.5, contract.M_FINITE: 1.0}, t)
            for s, v, t in data[401:560]]
    curves.publish(trainer, calm)
    live_ingest.drain()
    # the replayed timeline is calm (an info-level bump at most: smoothed levels remember the later, lower loss)
    assert [a for a in curves.stored(run_id) if a[2] > 400 and a[5] != "info"] == []
    gone = Anomaly.objects.filter(run_id=run_id, superseded=True)
    spikes = {(a.metric, a.start_step) for a in gone if a.kind == "loss_spike"}
    # the 3-step spike at 520: the total loss's episode, and the noisy per-domain loss's (a point, then a climb)
    assert (contract.M_LOSS, 520) in spikes and (contract.domain_loss("web"), 520) in spikes
    assert {m for m, _ in spikes} == {contract.M_LOSS, contract.domain_loss("web")}
    assert all(400 < s <= 522 for _, s in spikes)
    assert any(a.kind == "nonfinite" and a.start_step == 420 for a in gone)
    sup = [a for f in frames(live_ingest.pushed) for a in f["anomalies"] if a["event"] == "superseded"]
    assert {a["id"] for a in sup} == set(gone.values_list("id", flat=True))


def test_the_timer_opens_a_stall_while_the_heartbeat_lives_and_a_lost_heartbeat_after(trainer, live_ingest,
                                                                                       redis_client, run_id):
    data = curves.rows(40)
    trainer.send("state", state="training", step=0, detail="")
    for i in range(0, 40, 8):  # a few batches, as a live trainer's steps arrive
        curves.publish(trainer, [(s, v, time.time() - 40 + s * 0.2) for s, v, _ in data[i:i + 8]])
        live_ingest.drain()
    trainer.send("heartbeat", phase="training", step=39, tokens=0, token_budget=1, eta_s=None, steps_per_s=5.0,
                 since_step_s=120.0, pid=1, t=time.time())
    live_ingest.drain()
    redis_client.set(contract.heartbeat_key(run_id), "{}", ex=contract.HEARTBEAT_TTL_S)
    got = DETECTION.tick(time.time())
    (run, frame), = got
    assert run == run_id and frame["type"] == "anomaly"
    (stall,) = frame["anomalies"]
    assert stall["kind"] == "stall" and stall["event"] == "opened" and stall["start_step"] == 39
    assert DETECTION.tick(time.time()) == []  # nothing new: no frame, no write
    redis_client.delete(contract.heartbeat_key(run_id))
    (_, frame), = DETECTION.tick(time.time())
    assert [a["kind"] for a in frame["anomalies"]] == ["heartbeat_lost"]
    assert frame["anomalies"][0]["severity"] == "critical"
    # the next step closes the stall; a fresh heartbeat closes the loss of it
    curves.publish(trainer, [(40, data[39][1], time.time())])
    live_ingest.drain()
    redis_client.set(contract.heartbeat_key(run_id), "{}", ex=contract.HEARTBEAT_TTL_S)
    DETECTION.tick(time.time())
    ended = dict(Anomaly.objects.filter(run_id=run_id, kind__in=["stall", "heartbeat_lost"])
                 .values_list("kind", "end_step"))
    assert ended["stall"] == 40 and ended["heartbeat_lost"] is not None


def test_runs_that_ended_or_never_had_a_heartbeat_are_not_watched(trainer, live_ingest, redis_client, run_id):
    curves.publish(trainer, curves.rows(30))
    trainer.send("state", state="stopped", step=29, detail="")
    live_ingest.drain()
    Run.objects.filter(pk=run_id).update(last_heartbeat_at=None)
    assert DETECTION.tick(time.time()) == []
    assert not Anomaly.objects.filter(run_id=run_id, kind="heartbeat_lost").exists()


def test_a_hook_bug_is_logged_and_ingest_goes_on(trainer, live_ingest, run_id, monkeypatch, caplog):
    from webapp.metrics import changes

    def broken(changes):
        raise RuntimeError("boom")

    monkeypatch.setattr(changes, "on_commit_hooks", [broken])
    curves.publish(trainer, curves.rows(5))
    assert live_ingest.drain() == 5
    assert Run.objects.get(pk=run_id).last_step == 4
    assert "boom" in caplog.text


def test_the_timer_saves_the_snapshot_of_a_run_that_went_quiet(trainer, live_ingest, run_id, monkeypatch):
    from webapp.anomalies import detect

    curves.publish(trainer, curves.rows(100)[:60])
    live_ingest.drain()
    saved = DetectorState.objects.get(run_id=run_id).last_step
    curves.publish(trainer, curves.rows(100)[60:70])
    live_ingest.drain()  # calm, and soon after the last save: kept in memory
    assert DetectorState.objects.get(run_id=run_id).last_step == saved < 69
    monkeypatch.setattr(detect, "SAVE_EVERY_S", 0.0)
    DETECTION.tick(time.time())
    assert DetectorState.objects.get(run_id=run_id).last_step == 69
