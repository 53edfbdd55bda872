"""Telemetry stream caps on a real Redis: a publisher never trims what ingest has not acknowledged; what has to go
(past the hard cap, or past the cap with no reader at all) is counted and announced on the stream."""

from __future__ import annotations

import json

import pytest

from observatory import contract
from observatory.streams import Publisher, StreamConsumer, ensure_group
from observatory.streams.trim import maybe_trim, trim_telemetry


def _publish(pub, steps):
    for step in steps:
        pub.metrics(step, {contract.M_LOSS: float(step)})
    assert pub.flush(30)


def _read_all(reader):
    """Read and acknowledge everything the group has for this reader: (metrics steps, other messages)."""
    steps, other = [], []
    while entries := reader.read(count=500):
        for _, fields in entries:
            msg = contract.decode(fields)
            (steps.append(msg.data["step"]) if msg.kind == "metrics" else other.append(msg))
        reader.ack(*[eid for eid, _ in entries])
    return steps, other


def _lost(client, run_id) -> dict:
    return {k.decode(): int(v) for k, v in client.hgetall(contract.telemetry_lost_key(run_id)).items()}


def _unaccounted(client, stream, run_id) -> int:
    """Entries ever added to the stream that are neither on it nor counted as lost (acknowledged ones excluded)."""
    return client.xinfo_stream(stream)["entries-added"] - client.xlen(stream) - _lost(client, run_id).get("trimmed", 0)


def test_ingest_fallen_far_behind_a_capped_stream_loses_nothing(redis_url, redis_client, run_id, caps):
    stream = contract.telemetry_stream(run_id)
    reader = StreamConsumer(redis_client, stream, contract.INGEST_GROUP, "ingest-1")
    reader.read()  # the group exists, as ingest makes it when it finds the stream
    pub = Publisher(redis_url, run_id, batch=100)
    _publish(pub, range(1200))
    assert _read_all(reader)[0] == list(range(1200))  # read and acknowledged
    _publish(pub, range(1200, 2700))  # then ingest stops: 1,500 entries behind a cap of 1,000
    pub.close()
    assert redis_client.xlen(stream) <= 1501  # what ingest had acknowledged was trimmed past the cap
    assert _read_all(reader) == (list(range(1200, 2700)), [])  # every unread entry is still there
    assert _lost(redis_client, run_id) == {} and pub.stats()["dropped"] == 0


def test_past_the_hard_cap_the_oldest_unread_entries_go_counted_and_announced(redis_url, redis_client, run_id, caps):
    stream = contract.telemetry_stream(run_id)
    reader = StreamConsumer(redis_client, stream, contract.INGEST_GROUP, "ingest-1")
    reader.read()
    pub = Publisher(redis_url, run_id, batch=100)
    _publish(pub, range(3000))  # ingest reads nothing: 3,000 behind a hard cap of 2,000
    pub.close()
    assert redis_client.xlen(stream) <= 2001
    lost = _lost(redis_client, run_id)["trimmed"]
    assert lost >= 1000 and _unaccounted(redis_client, stream, run_id) == 0
    steps, other = _read_all(reader)
    assert steps == list(range(steps[0], 3000))  # the newest are kept, with no gap
    events = [m.data for m in other if m.kind == "event" and m.data["name"] == contract.TELEMETRY_LOST_EVENT]
    assert events and events[-1]["payload"]["total"] == lost and events[-1]["payload"]["how"] == "trimmed"
    assert sum(e["payload"]["lost"] for e in events) <= lost  # (earlier announcements may be trimmed themselves)
    assert "behind" in events[-1]["payload"]["why"] and events[-1]["step"] > 2000


def test_a_stream_no_group_reads_keeps_its_cap_and_counts_what_it_trims(redis_url, redis_client, run_id, caps):
    stream = contract.telemetry_stream(run_id)
    pub = Publisher(redis_url, run_id, batch=100)
    _publish(pub, range(2500))
    pub.close()
    assert redis_client.xlen(stream) <= 1001
    assert _lost(redis_client, run_id)["trimmed"] >= 1500 and _unaccounted(redis_client, stream, run_id) == 0
    last = json.loads(redis_client.xrevrange(stream, count=1)[0][1][b"data"])
    assert last["name"] == contract.TELEMETRY_LOST_EVENT and "no consumer group" in last["payload"]["why"]


def test_the_slowest_group_and_its_oldest_pending_entry_bound_the_trim(redis_client, run_id):
    stream = contract.telemetry_stream(run_id)
    ids = [redis_client.xadd(stream, contract.metrics_fields(run_id, s, {"a": 1.0})) for s in range(100)]
    ensure_group(redis_client, stream, contract.INGEST_GROUP)
    ensure_group(redis_client, stream, "other")
    fast = StreamConsumer(redis_client, stream, contract.INGEST_GROUP, "c1")
    got = [eid for eid, _ in fast.read(count=90)]
    fast.ack(*[e for e in got if e != ids[40].decode()])  # entry 40 stays pending
    slow = StreamConsumer(redis_client, stream, "other", "c2")
    slow.ack(*[eid for eid, _ in slow.read(count=60)])
    assert trim_telemetry(redis_client, run_id, cap=10, hard_cap=1000) == {"lost": 0, "acknowledged": 40,
                                                                           "length": 60}
    assert redis_client.xrange(stream, count=1)[0][0] == ids[40]  # the pending entry is kept
    fast.ack(ids[40])
    assert trim_telemetry(redis_client, run_id, cap=10, hard_cap=1000)["length"] == 41  # "other" read to 59
    slow.ack(*[eid for eid, _ in slow.read(count=100)])
    assert trim_telemetry(redis_client, run_id, cap=10, hard_cap=1000)["length"] == 11  # "c1" read to 89
    assert trim_telemetry(redis_client, run_id, cap=100, hard_cap=1000)["acknowledged"] == 0  # under the cap
    assert _lost(redis_client, run_id) == {}


def test_caps_are_checked_and_the_schedule_is_shared(redis_client, run_id, monkeypatch):
    with pytest.raises(ValueError, match="cap"):
        trim_telemetry(redis_client, run_id, cap=10, hard_cap=5)
    monkeypatch.setattr(contract, "TRIM_EVERY_S", 60.0)
    assert maybe_trim(redis_client, run_id) is not None
    assert maybe_trim(redis_client, run_id) is None  # another producer checked within TRIM_EVERY_S
