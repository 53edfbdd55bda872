"""Ingest under faults, each test written first against the defect it reproduces: a Redis restart that loses the
streams, hostile nesting, streams of runs never announced, a second consumer racing the first, a consumer that lost
its lease, and an ingest killed between its commit and its live push."""

import pytest

from observatory import contract
from observatory.streams import connect
from webapp.metrics import ingest as ingest_mod
from webapp.metrics import leases
from webapp.metrics.ingest import Ingestor
from webapp.metrics.models import Point

from ..conftest import Trainer
from ..servers import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def _steps(run_id, name="loss"):
    return list(Point.objects.filter(series__run_id=run_id, series__name=name).order_by("step")
                .values_list("step", flat=True))


def _pump(ing, done, what, timeout=15):
    """Run ingest steps the way `manage.py ingest` does (any error: retry on the next step) until done()."""
    def once():
        try:
            ing.step(20)
        except Exception:  # the command logs, backs off and retries every error; a stall shows as a timeout
            pass
        return done()
    wait_for(once, timeout, what, every=0.0)


def test_ingest_recovers_by_itself_when_a_redis_restart_loses_the_streams(private_redis, run_id, monkeypatch):
    monkeypatch.setattr(ingest_mod, "RECLAIM_EVERY_S", 0.0, raising=False)  # the old periodic reclaim, due now
    client = private_redis.start()
    ing = Ingestor(connect(private_redis.url), consumer="c1")
    Trainer(client, run_id).metrics(0, loss=1.0)
    _pump(ing, lambda: _steps(run_id) == [0], "step 0 to be stored")
    client = private_redis.restart()  # --appendonly no, --save '': streams, groups and the runs set are gone
    trainer = Trainer(client, run_id)  # the publisher registers the run again on its new connection
    trainer.metrics(1, loss=2.0)
    _pump(ing, lambda: _steps(run_id) == [0, 1], "step 1, published after the restart, to be stored")
    ing.close()


@pytest.mark.parametrize("depth,reason", [(33, "too_deep"), (900, "too_deep"), (5000, "bad_json")])
def test_a_hostile_nesting_is_dead_lettered_with_its_reason_and_the_batch_goes_on(trainer, ingestor, run_id,
                                                                                   redis_client, depth, reason):
    deep = "[" * depth + "]" * depth
    trainer.metrics(0, loss=1.0)
    trainer.raw({"v": "1", "kind": "event", "run": run_id,
                 "data": '{"t": 1, "step": 1, "name": "x", "payload": {"a": ' + deep + "}}"})
    trainer.raw({"v": "1", "kind": "run", "run": run_id,
                 "data": '{"t": 1, "name": "n", "config": {"a": ' + deep + "}}"})
    trainer.metrics(1, loss=2.0)
    assert ingestor.drain() == 4
    assert _steps(run_id) == [0, 1]
    counts = {k.decode(): int(v) for k, v in redis_client.hgetall(contract.DEADLETTER_COUNT_KEY).items()}
    assert counts == {reason: 2}  # not "internal": nothing blew the stack
    assert ingestor.stats["messages"] == 2 and len(ingestor.changes) == 1  # one transaction, no one-by-one retry
    assert redis_client.xpending(trainer.stream, contract.INGEST_GROUP)["pending"] == 0


def test_streams_of_runs_never_announced_are_ingested_or_dead_lettered(ingestor, redis_client, run_id):
    stream = contract.telemetry_stream(run_id)  # a valid run id, but never added to obs:runs
    redis_client.xadd(stream, contract.metrics_fields(run_id, 0, {"loss": 1.0}))
    bad = "obs:run:not a run id!:telemetry"
    redis_client.xadd(bad, {"v": "1", "kind": "metrics", "run": "not a run id!", "data": "{}"})
    redis_client.xadd(bad, {"junk": "x"})
    assert ingestor.drain() == 3
    assert _steps(run_id) == [0]
    letters = redis_client.xrange(contract.DEADLETTER_STREAM)
    assert [(e[1][b"stream"].decode(), e[1][b"reason"].decode()) for e in letters] == [
        (bad, "bad_run"), (bad, "missing_field")]
    assert redis_client.xlen(bad) == 0  # read, dead-lettered and removed: nothing piles up
    assert redis_client.xpending(stream, contract.INGEST_GROUP)["pending"] == 0


def test_a_second_consumer_cannot_apply_a_rewind_out_of_order(trainer, redis_client, run_id):
    """Two consumers: the first reads points and a rewind, the second the points published after the rewind and
    commits first. Applied in that order, the rewind would delete the newer points. With leases the second
    consumer gets nothing of a stream the first one holds."""
    for step in range(20):
        trainer.metrics(step, loss=1.0)
    trainer.send("rewind", from_step=19, to_step=9)
    a, b = Ingestor(redis_client, consumer="a", batch=21), Ingestor(redis_client, consumer="b", batch=21)
    for ing in (a, b):
        ing.renew()
        ing.discover()
    first = a.read()
    for step in range(10, 15):
        trainer.metrics(step, loss=2.0)
    second = b.read()
    assert second == []
    a.process(first)
    for ing in (a, b):
        ing.drain()
    assert _steps(run_id) == list(range(15))
    assert list(Point.objects.filter(series__run_id=run_id, step__gte=10).values_list("value", flat=True)) == [2.0] * 5


def test_a_consumer_that_lost_its_lease_cannot_commit_after_its_successor(trainer, redis_client, run_id):
    """The zombie read a batch, stalled past its lease, and wakes up after another consumer took the stream over
    and applied newer entries: its stale batch must not be applied (it would resurrect superseded points)."""
    for step in range(20):
        trainer.metrics(step, loss=1.0)
    zombie = Ingestor(redis_client, consumer="zombie")
    zombie.renew()
    zombie.discover()
    stale = zombie.read()
    redis_client.delete(leases.lease_key(trainer.stream))  # its lease expired while it stalled
    trainer.send("rewind", from_step=19, to_step=4)
    successor = Ingestor(redis_client, consumer="successor")
    assert successor.drain() == 21  # the zombie's pending entries, taken over, and the rewind
    assert zombie.process(stale) == 0  # fenced: nothing written, nothing acknowledged
    assert zombie.stats["fenced"] == 1 and trainer.stream not in zombie.streams
    assert _steps(run_id) == list(range(5))
    assert redis_client.xpending(trainer.stream, contract.INGEST_GROUP)["pending"] == 0


def test_entries_stay_pending_until_their_live_push_and_a_successor_pushes_them(trainer, redis_client, run_id):
    """An ingest killed after committing a batch but before pushing it live: acknowledged already, the batch's
    points would be missing from every open dashboard (the successor starts after them). Unacknowledged, the
    successor replays the batch (idempotent) and pushes it."""
    from webapp.live.pipeline import LiveIngest

    first_pushes, second_pushes = [], []
    first = LiveIngest(redis_client, lambda run, *bodies: first_pushes.extend(bodies), interval=3600.0)
    for step in range(5):
        trainer.metrics(step, loss=float(step))
    assert first.ingestor.drain() == 5  # committed; its push waits for the interval
    assert first_pushes == [] and _steps(run_id) == list(range(5))
    assert redis_client.xpending(trainer.stream, contract.INGEST_GROUP)["pending"] == 5
    redis_client.delete(leases.lease_key(trainer.stream))  # killed -9: its lease expires
    second = LiveIngest(redis_client, lambda run, *bodies: second_pushes.extend(bodies), interval=0.0)
    assert second.drain() == 5
    (body,) = second_pushes
    assert body["series"]["loss"]["steps"] == list(range(5))
    assert redis_client.xpending(trainer.stream, contract.INGEST_GROUP)["pending"] == 0
    second.close()


def test_an_entry_written_twice_by_a_publisher_retry_is_stored_once(trainer, ingestor, run_id):
    """A publisher re-sends what a restarted Redis lost; the stream may then hold an entry twice (new ids)."""
    from webapp.runs.models import RunEvent

    for _ in range(2):
        trainer.send("event", step=3, name="checkpoint_saved", payload={"path": "/c/3"}, t=1_700_000_123.25)
        trainer.send("state", state="training", step=3, detail="", t=1_700_000_123.5)
        trainer.metrics(3, loss=1.5)
    assert ingestor.drain() == 6
    assert list(RunEvent.objects.filter(run_id=run_id).values_list("kind", "name")) == [
        ("event", "checkpoint_saved"), ("state", "training")]
    assert _steps(run_id) == [3]
