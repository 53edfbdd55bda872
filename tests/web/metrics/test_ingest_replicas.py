"""Replicated ingest: three consumers share live streams with interleaved rewinds, one of them dies holding entries,
and the stored series equal what one consumer stores from the same streams (and what the stream means).

Runs on the default SQLite and on PostgreSQL (.ci/run's second pass, DATABASE_URL): consumers are threads, each
with its own database connection, so on PostgreSQL their transactions really overlap."""

import random
import threading

import pytest
from django.db import connection

from observatory import contract
from webapp.metrics.ingest import Ingestor
from webapp.metrics.models import Block, Point, Series

from ..conftest import Trainer
from ..servers import wait_for
from .test_ingest import _assert_pyramid_consistent

pytestmark = pytest.mark.django_db(transaction=True)

NAMES = ("loss", "lr", "grad/norm")


def script(seed: int, n: int = 160) -> list[tuple]:
    """A run's telemetry: steps forward, now and then a rewind to an earlier step (a resume from a checkpoint)
    and a re-sent step; values differ on every pass so that a stale point would show."""
    rnd = random.Random(seed)
    ops, step, gen = [], 0, 0
    while len(ops) < n:
        if step > 12 and rnd.random() < 0.06:
            to = rnd.randrange(step // 2, step)
            ops.append(("rewind", step - 1, to))
            step, gen = to + 1, gen + 1
        elif step > 3 and rnd.random() < 0.04:
            ops.append(("metrics", step - 2, gen + 0.5))  # a late, re-sent step
        else:
            ops.append(("metrics", step, gen))
            step += 1
    return ops


def publish(trainer: Trainer, op: tuple) -> None:
    if op[0] == "rewind":
        trainer.send("rewind", from_step=op[1], to_step=op[2])
    else:
        step, gen = op[1], op[2]
        trainer.metrics_named(step, {n: gen * 1000 + step + i / 10 for i, n in enumerate(NAMES)})


def meaning(ops: list[tuple]) -> dict[int, float]:
    """What the stream says the loss series is: later points overwrite, a rewind drops every later step."""
    pts = {}
    for op in ops:
        if op[0] == "rewind":
            pts = {s: v for s, v in pts.items() if s <= op[2]}
        else:
            pts[op[1]] = op[2] * 1000 + op[1]
    return pts


def stored(run_id: str) -> dict:
    out = {}
    for series in Series.objects.filter(run_id=run_id).order_by("name"):
        out[series.name] = (
            list(Point.objects.filter(series=series).order_by("step").values_list("step", "value", "special")),
            list(Block.objects.filter(series=series).order_by("level", "idx").values_list(
                "level", "idx", *Block.SUMMARY_FIELDS)),
            (series.count, series.first_step, series.last_step))
    return out


def drained(client, streams) -> bool:
    for stream in streams:
        groups = client.xinfo_groups(stream) if client.exists(stream) else []
        g = next((g for g in groups if g["name"] == contract.INGEST_GROUP.encode()), None)
        if g is None or g["pending"] or g["lag"]:
            return False
    return True


class Consumer(threading.Thread):
    """An ingest process, as a thread: steps until told to stop; `die_after` batches it reads one more batch and
    stops without processing it or releasing anything (kill -9 while holding entries)."""

    def __init__(self, client, name, die_after=None):
        super().__init__(name=name, daemon=True)
        self.ing = Ingestor(client, consumer=name, batch=7, lease_ms=600)
        self.die_after, self.stop, self.error, self.died = die_after, threading.Event(), None, False

    def run(self):
        try:
            while not self.stop.is_set():
                if self.die_after is not None and self.ing.stats["entries"] >= self.die_after:
                    if self.ing.read():  # delivered to it, never acknowledged
                        self.ing._stop.set()  # and its lease renewals die with it
                        self.died = True
                        return
                    self.stop.wait(0.005)
                    continue
                self.ing.step(10)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.error = e
        finally:
            connection.close()


def test_three_consumers_with_rewinds_and_a_death_store_what_one_consumer_stores(redis_client):
    seeds = range(4)
    scripts = {seed: script(seed) for seed in seeds}
    multi = {seed: Trainer(redis_client, f"multi-{seed}") for seed in seeds}
    # c1 starts alone and takes every stream; c2 and c3 join once it is busy (c1 hands streams over to them),
    # then c1 dies holding a batch it read (its streams pass to the others when its leases expire)
    consumers = [Consumer(redis_client, "c1", die_after=40), Consumer(redis_client, "c2"),
                 Consumer(redis_client, "c3")]
    consumers[0].start()
    rnd = random.Random(99)
    pos = {seed: 0 for seed in seeds}
    published = 0
    while any(pos[s] < len(scripts[s]) for s in seeds):  # the runs publish interleaved, in bursts
        if published > 100 and not consumers[1].is_alive():
            wait_for(lambda: consumers[0].ing.stats["entries"] >= 10, 30, "c1 to get going")
            for c in consumers[1:]:
                c.start()
        seed = rnd.choice([s for s in seeds if pos[s] < len(scripts[s])])
        burst = rnd.randint(1, 9)
        for op in scripts[seed][pos[seed]:pos[seed] + burst]:
            publish(multi[seed], op)
        pos[seed] += burst
        published += burst
    wait_for(lambda: drained(redis_client, [t.stream for t in multi.values()]), 60,
             "the consumers to apply every entry")
    for c in consumers:
        c.stop.set()
        c.join(10)
        assert c.error is None, repr(c.error)
        c.ing.close()
    assert consumers[0].died and consumers[1].ing.stats["entries"] and consumers[2].ing.stats["entries"]
    assert sum(c.ing.stats["reclaimed"] for c in consumers[1:]) > 0  # and its entries were taken over

    single = {seed: Trainer(redis_client, f"single-{seed}") for seed in seeds}
    for seed in seeds:
        for op in scripts[seed]:
            publish(single[seed], op)
    one = Ingestor(redis_client, consumer="one", batch=7)
    one.drain()
    one.close()
    for seed in seeds:
        got, want = stored(f"multi-{seed}"), stored(f"single-{seed}")
        assert got == want, f"run {seed}: three consumers stored something else than one"
        assert {s: v for s, v, _ in got["loss"][0]} == pytest.approx(meaning(scripts[seed]))
        _assert_pyramid_consistent(f"multi-{seed}")
