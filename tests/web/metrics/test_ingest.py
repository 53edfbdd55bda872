"""Ingest: contract entries on real Redis streams -> real database, dead letters, restarts, rewinds, NaN."""

import json
import math
import random

import pytest

from observatory import contract
from observatory import downsample as ds
from webapp.metrics import leases
from webapp.metrics.ingest import Ingestor
from webapp.metrics.models import Block, Point, Series
from webapp.runs.models import Run, RunEvent

from ..servers import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def _points(run_id, name):
    return list(Point.objects.filter(series__run_id=run_id, series__name=name).order_by("step")
                .values_list("step", "value", "special"))


def _assert_pyramid_consistent(run_id):
    """Incrementally maintained blocks == blocks rebuilt from the raw points; totals match too."""
    for series in Series.objects.filter(run_id=run_id):
        pts = list(Point.objects.filter(series=series).order_by("step").values_list("step", "value", "special"))
        expect = {(lvl, idx): s for lvl, idx, s in ds.build_pyramid(pts)}
        got = {(b.level, b.idx): ds.Summary(**{f: getattr(b, f) for f in Block.SUMMARY_FIELDS})
               for b in Block.objects.filter(series=series)}
        assert got == expect, series.name
        assert series.count == len(pts)
        assert (series.first_step, series.last_step) == ((pts[0][0], pts[-1][0]) if pts else (None, None))


def test_it_writes_every_kind_of_message(trainer, ingestor, run_id, redis_client):
    trainer.send("run", name="demo", config={"lr": 3e-3, "weird": math.nan}, started_at=1_700_000_000.0)
    trainer.send("manifest", manifest={"domains": ["py", "licenses"]})
    trainer.send("state", state="training", step=0, detail="")
    for step in range(20):
        trainer.metrics(step, **{contract.M_LOSS: 5.0 - step * 0.1, contract.M_LR: 1e-3})
    trainer.send("heartbeat", phase="training", step=19, tokens=1234, eta_s=10.0, steps_per_s=2.0)
    trainer.send("event", step=10, name="checkpoint_saved", payload={"path": "/ckpt/10"})
    assert ingestor.drain() == 25

    run = Run.objects.get(pk=run_id)
    assert (run.name, run.state, run.phase, run.last_step, run.health) == ("demo", "training", "training", 19,
                                                                          "alive")
    assert run.config == {"lr": 3e-3, "weird": "NaN"}
    assert run.manifest == {"domains": ["py", "licenses"]}
    assert run.heartbeat["tokens"] == 1234 and run.last_heartbeat_at is not None
    assert len(_points(run_id, contract.M_LOSS)) == 20
    assert _points(run_id, contract.M_LOSS)[3] == (3, pytest.approx(4.7), 0)
    assert list(RunEvent.objects.filter(run=run).values_list("kind", "name")) == [
        ("state", "training"), ("event", "checkpoint_saved")]
    assert redis_client.xpending(trainer.stream, contract.INGEST_GROUP)["pending"] == 0
    _assert_pyramid_consistent(run_id)
    # one batch, one set of changes, carrying all new points of both series
    (batch,) = ingestor.changes
    assert list(batch) == [run_id]
    changes = batch[run_id]
    assert sorted(changes.points[contract.M_LOSS]) == list(range(20))
    assert changes.new_series == {contract.M_LOSS, contract.M_LR}
    assert changes.run["state"] == "training"
    assert [e["name"] for e in changes.events] == ["training", "checkpoint_saved"]


MALFORMED = {
    "missing_field": {"v": "1", "kind": "metrics", "run": "{run}"},
    "wrong_type": {"v": "1", "kind": "metrics", "run": "{run}", "data": '{"t": 1, "step": "x", "values": {}}'},
    "bad_version": {"v": "9", "kind": "metrics", "run": "{run}", "data": '{"t": 1, "step": 1, "values": {}}'},
    "unknown_kind": {"v": "1", "kind": "gossip", "run": "{run}", "data": '{"t": 1}'},
    "oversized": {"v": "1", "kind": "event", "run": "{run}",
                  "data": json.dumps({"t": 1, "step": 1, "name": "x", "payload": {"a": "x" * 300_000}})},
    "bad_json": {"v": "1", "kind": "metrics", "run": "{run}", "data": "{not json"},
    "bad_run": {"v": "1", "kind": "metrics", "run": "someone-else", "data": '{"t": 1, "step": 1, "values": {}}'},
    "bad_name": {"v": "1", "kind": "metrics", "run": "{run}", "data": '{"t": 1, "step": 1, "values": {"a b": 1}}'},
    "bad_encoding": {"v": "1", "kind": "metrics", "run": "{run}", "data": b"\xff\xfe"},
}


def test_it_dead_letters_each_malformed_entry_and_keeps_going(trainer, ingestor, run_id, redis_client):
    trainer.metrics(0, **{contract.M_LOSS: 1.0})
    for fields in MALFORMED.values():
        trainer.raw({k: v.replace("{run}", run_id) if isinstance(v, str) else v for k, v in fields.items()})
    trainer.metrics(1, **{contract.M_LOSS: 2.0})
    assert ingestor.drain() == len(MALFORMED) + 2

    assert [p[0] for p in _points(run_id, contract.M_LOSS)] == [0, 1]
    counts = {k.decode(): int(v) for k, v in redis_client.hgetall(contract.DEADLETTER_COUNT_KEY).items()}
    assert counts == {reason: 1 for reason in MALFORMED}
    letters = redis_client.xrange(contract.DEADLETTER_STREAM)
    assert [e[1][b"reason"].decode() for e in letters] == list(MALFORMED)
    assert all(e[1][b"stream"].decode() == trainer.stream for e in letters)
    assert redis_client.xpending(trainer.stream, contract.INGEST_GROUP)["pending"] == 0


def test_a_restart_with_pending_entries_loses_and_duplicates_nothing(trainer, redis_client, run_id):
    for step in range(50):
        trainer.metrics(step, **{contract.M_LOSS: float(step)})
    trainer.send("event", step=5, name="once", payload={})

    first = Ingestor(redis_client, consumer="c1")
    first.renew()
    first.discover()
    assert sum(len(e) for _, e in first.read()) == 51  # delivered, then the process "dies" before writing
    first.close()  # (or its lease expires)

    # Crash between commit and XACK: the effects are in the database, the entries still pending.
    for step in range(50, 60):
        trainer.metrics(step, **{contract.M_LOSS: float(step)})
    second = Ingestor(redis_client, consumer="c2")  # another process: takes over c1's pending entries
    second.renew()
    second.discover()
    batch = second.read()  # the pending entries first (ids 0..50)
    assert sum(len(e) for _, e in batch) == 51
    second.r = _NoAck(redis_client)
    with pytest.raises(RuntimeError):
        second.process(batch)
    assert len(_points(run_id, contract.M_LOSS)) == 50
    second.close()

    third = Ingestor(redis_client, consumer="c1")  # the restart
    assert third.drain() == 61
    assert [p[0] for p in _points(run_id, contract.M_LOSS)] == list(range(60))
    assert RunEvent.objects.filter(run_id=run_id, name="once").count() == 1
    assert redis_client.xpending(trainer.stream, contract.INGEST_GROUP)["pending"] == 0
    _assert_pyramid_consistent(run_id)


def test_a_dead_consumers_streams_and_pending_entries_pass_to_another_when_its_lease_expires(trainer, redis_client,
                                                                                              run_id):
    for step in range(10):
        trainer.metrics(step, **{contract.M_LOSS: float(step)})
    dead = Ingestor(redis_client, consumer="dead", lease_ms=300)
    dead.renew()
    dead.discover()
    assert sum(len(e) for _, e in dead.read()) == 10  # then killed -9: no close(), the lease just expires
    other = Ingestor(redis_client, consumer="other", lease_ms=300)
    assert other.drain() == 0  # the stream is still dead's
    wait_for(lambda: not redis_client.exists(leases.lease_key(trainer.stream)), 10, "the dead lease to expire")
    assert other.drain() == 10
    assert len(_points(run_id, contract.M_LOSS)) == 10
    assert redis_client.xpending(trainer.stream, contract.INGEST_GROUP)["pending"] == 0
    assert dead.read() == [] and trainer.stream not in dead.streams  # a late read finds the lease gone


class _NoAck:
    """A Redis client whose XACK pipeline fails: the crash window between commit and acknowledgement."""

    def __init__(self, real):
        self.real = real

    def pipeline(self, transaction=False):
        pipe = self.real.pipeline(transaction=transaction)

        def xack(*a, **k):
            raise RuntimeError("killed before XACK")

        pipe.xack = xack
        return pipe

    def __getattr__(self, name):
        return getattr(self.real, name)


def test_a_rewind_supersedes_later_points(trainer, ingestor, run_id):
    for step in range(100):
        trainer.metrics(step, **{contract.M_LOSS: 1.0, "eval/loss": 2.0})
    ingestor.drain()
    trainer.send("rewind", from_step=99, to_step=49)
    for step in range(50, 70):
        trainer.metrics(step, **{contract.M_LOSS: 3.0})  # eval/loss is not re-published yet
    ingestor.drain()

    loss = _points(run_id, contract.M_LOSS)
    assert [p[0] for p in loss] == list(range(70))
    assert {p[1] for p in loss if p[0] >= 50} == {3.0}
    assert [p[0] for p in _points(run_id, "eval/loss")] == list(range(50))
    assert Run.objects.get(pk=run_id).last_step == 69
    assert RunEvent.objects.get(run_id=run_id, kind="rewind").payload == {"from_step": 99, "to_step": 49}
    _assert_pyramid_consistent(run_id)
    changes = ingestor.changes[-1][run_id]
    assert changes.rewinds == [{"from_step": 99, "to_step": 49}]
    assert sorted(changes.points[contract.M_LOSS]) == list(range(50, 70))


def test_a_rewind_inside_one_batch_keeps_only_the_new_points(trainer, ingestor, run_id):
    for step in range(30):
        trainer.metrics(step, loss=1.0)
    trainer.send("rewind", from_step=29, to_step=9)
    for step in range(10, 20):
        trainer.metrics(step, loss=2.0)
    ingestor.drain()
    assert _points(run_id, "loss") == [(s, 1.0 if s < 10 else 2.0, 0) for s in range(20)]
    _assert_pyramid_consistent(run_id)
    (batch,) = ingestor.changes
    assert sorted(batch[run_id].points["loss"]) == list(range(20))  # the superseded points are not reported


def test_nan_and_inf_are_stored_not_dropped(trainer, ingestor, run_id):
    trainer.metrics(0, loss=1.0)
    trainer.metrics(1, loss=math.nan)
    trainer.metrics(2, loss=math.inf)
    trainer.metrics(3, loss=-math.inf)
    ingestor.drain()
    assert _points(run_id, "loss") == [(0, 1.0, 0), (1, None, ds.NAN), (2, None, ds.POSINF), (3, None, ds.NEGINF)]
    (batch,) = ingestor.changes
    assert batch[run_id].points["loss"] == {0: (1.0, 0), 1: (None, ds.NAN), 2: (None, ds.POSINF),
                                             3: (None, ds.NEGINF)}
    _assert_pyramid_consistent(run_id)


def test_blocks_stay_consistent_through_random_batches(trainer, ingestor, run_id):
    rnd = random.Random(7)
    steps = list(range(0, 3000, 3))
    for i in range(0, len(steps), 137):
        for step in steps[i:i + 137]:
            trainer.metrics(step, a=rnd.gauss(0, 1), b=rnd.choice([rnd.random()] * 30 + [math.nan]))
        ingestor.drain()
    for step in rnd.sample(steps, 40):  # re-sent steps overwrite (upsert), never duplicate
        trainer.metrics(step, a=100.0)
    ingestor.drain()
    assert Point.objects.filter(series__run_id=run_id, series__name="a").count() == len(steps)
    _assert_pyramid_consistent(run_id)


def test_a_step_too_large_for_the_database_is_dead_lettered_not_retried_forever(trainer, ingestor, run_id,
                                                                                 redis_client):
    trainer.metrics(0, loss=1.0)
    trainer.metrics(2**70, loss=1.0)  # too large for a 64-bit step column: the contract caps steps at 2**62
    trainer.metrics(1, loss=2.0)
    assert ingestor.drain() == 3
    assert [p[0] for p in _points(run_id, "loss")] == [0, 1]
    (letter,) = redis_client.xrange(contract.DEADLETTER_STREAM)
    assert letter[1][b"reason"] == b"wrong_type"
    assert redis_client.xpending(trainer.stream, contract.INGEST_GROUP)["pending"] == 0
    _assert_pyramid_consistent(run_id)


def test_an_append_that_meets_a_stored_step_falls_back_to_the_general_path(trainer, ingestor, run_id):
    for step in range(0, 40, 2):
        trainer.metrics(step, loss=1.0)
    ingestor.drain()
    # totals that lag behind the points (as if another writer had not updated them): the next batch looks like an
    # append but its insert meets stored steps; it must roll back to its savepoint and upsert instead
    Series.objects.filter(run_id=run_id).update(last_step=10)
    for step in range(11, 50):
        trainer.metrics(step, loss=2.0)
    ingestor.drain()
    loss = _points(run_id, "loss")
    assert [p[0] for p in loss] == list(range(0, 11, 2)) + list(range(11, 50))
    assert {v for s, v, _ in loss if s > 10} == {2.0}
    _assert_pyramid_consistent(run_id)
