"""The Redis stream seam: consumer groups that survive crashes and vanished streams, replies of both protocols."""

from __future__ import annotations

import redis as redis_lib

from observatory import contract
from observatory.streams import StreamConsumer, newest_metrics_step, read_group, streams_reply


def test_it_creates_the_group_and_reads_new_entries(redis_client):
    c = StreamConsumer(redis_client, "s1", "g", "c1")
    assert c.read(10) == []  # group and stream created, nothing to read
    redis_client.xadd("s1", {"a": "1"})
    entries = c.read(10, block_ms=1000)
    assert [f for _, f in entries] == [{b"a": b"1"}]
    assert all(isinstance(eid, str) for eid, _ in entries)


def test_it_rereads_its_own_pending_entries_before_new_ones(redis_client):
    redis_client.xadd("s1", {"n": "1"})
    first = StreamConsumer(redis_client, "s1", "g", "c1")
    got = first.read(10, block_ms=100)
    assert len(got) == 1  # delivered but never acked: the consumer "crashed"
    redis_client.xadd("s1", {"n": "2"})
    again = StreamConsumer(redis_client, "s1", "g", "c1")  # the same consumer name after a restart
    assert [f[b"n"] for _, f in again.read(10)] == [b"1"]
    again.ack(got[0][0])
    assert [f[b"n"] for _, f in again.read(10, block_ms=100)] == [b"2"]  # backlog done: new entries
    assert again.read(10, block_ms=10) == []


def test_it_recovers_when_the_stream_vanishes(redis_client):
    c = StreamConsumer(redis_client, "s1", "g", "c1")
    c.read(10)
    redis_client.delete("s1")  # as after a Redis restart without persistence
    assert c.read(10, block_ms=50) == []  # NOGROUP swallowed: the group is re-created on the next read
    redis_client.xadd("s1", {"n": "3"})
    assert [f[b"n"] for _, f in c.read(10, block_ms=100)] == [b"3"]


def test_it_parses_resp3_replies_like_resp2(redis_url):
    r2 = redis_lib.Redis.from_url(redis_url, protocol=2)
    r3 = redis_lib.Redis.from_url(redis_url, protocol=3)
    r2.delete("s2")
    r2.xadd("s2", {"k": "v"})
    for i, client in enumerate((r2, r3)):
        client.xgroup_create("s2", f"g{i}", id="0")
        reply = read_group(client, f"g{i}", "c", {"s2": ">"}, 10)
        assert [(s, [f for _, f in e]) for s, e in reply] == [("s2", [{b"k": b"v"}])]
    assert streams_reply(None) == [] and streams_reply({}) == []
    r2.delete("s2")


def test_it_finds_the_newest_metrics_step_behind_other_kinds(redis_client, run_id):
    stream = contract.telemetry_stream(run_id)
    assert newest_metrics_step(redis_client, run_id) is None
    for step in range(3):
        redis_client.xadd(stream, contract.metrics_fields(run_id, step, {"train/loss": 1.0}))
    for _ in range(700):  # more than one page of non-metrics entries after the last metrics entry
        redis_client.xadd(stream, contract.encode(run_id, "heartbeat", {"t": 1.0, "phase": "training", "step": 2}))
    assert newest_metrics_step(redis_client, run_id) == 2
    assert newest_metrics_step(redis_client, run_id, scan=500) is None
