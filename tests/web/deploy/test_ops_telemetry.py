"""What /metrics and /healthz say about telemetry on a real Redis: an ingest lag Redis cannot tell is "unknown",
never 0; entries lost before ingest read them are counted per run."""

from __future__ import annotations

import pytest

from observatory import contract
from webapp.ops import exposition, probes


def _exposition(redis_client) -> str:
    """The Redis part of /metrics, as /metrics renders it."""
    return exposition.render(probes.redis_families(redis_client))


def _samples(text: str, family: str) -> dict[str, float]:
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line.startswith(family + "{")}


@pytest.fixture
def stream(trainer):
    for step in range(20):
        trainer.metrics(step, loss=1.0)
    return trainer.stream


def test_a_lag_redis_cannot_tell_is_unknown_not_zero(client, db, redis_client, trainer, stream):
    ids = [eid for eid, _ in redis_client.xrange(stream)]
    redis_client.xdel(stream, ids[5])  # a deletion ahead of a group created at 0 (ingest re-creating it)
    redis_client.xgroup_create(stream, contract.INGEST_GROUP, id="0")
    (group,) = redis_client.xinfo_groups(stream)
    assert group["lag"] is None and group["entries-read"] is None  # the state the probe has to deal with
    text = _exposition(redis_client)
    assert f'run="{trainer.run_id}"' not in "".join(_samples(text, "observatory_ingest_lag_entries"))
    assert _samples(text, "observatory_ingest_lag_unknown") == {
        f'observatory_ingest_lag_unknown{{run="{trainer.run_id}"}}': 1}
    assert "observatory_ingest_lag_unknown_runs 1" in text
    body = client.get("/healthz").json()
    assert body["status"] == "ok" and body["ingest_lag"] == "unknown for 1 run"


def test_a_nil_lag_falls_back_to_entries_added_minus_entries_read(client, db, redis_client, trainer, stream):
    redis_client.xgroup_create(stream, contract.INGEST_GROUP, id="0")
    redis_client.xreadgroup(contract.INGEST_GROUP, "c", {stream: ">"}, count=8)
    ids = [eid for eid, _ in redis_client.xrange(stream)]
    redis_client.xdel(stream, ids[12])  # ahead of the group: Redis' lag is nil, its entries-read is not
    (group,) = redis_client.xinfo_groups(stream)
    assert group["lag"] is None and group["entries-read"] == 8
    text = _exposition(redis_client)
    assert _samples(text, "observatory_ingest_lag_entries") == {
        f'observatory_ingest_lag_entries{{run="{trainer.run_id}"}}': 12}  # 20 added - 8 read (an upper bound)
    assert _samples(text, "observatory_ingest_lag_unknown") == {
        f'observatory_ingest_lag_unknown{{run="{trainer.run_id}"}}': 0}
    assert client.get("/healthz").json()["ingest_lag"] == "ok"


def test_entries_lost_before_ingest_read_them_are_counted_per_run(redis_client, trainer, stream):
    redis_client.hincrby(contract.telemetry_lost_key(trainer.run_id), "trimmed", 1234)
    redis_client.hincrby(contract.telemetry_lost_key(trainer.run_id), "dropped", 5)
    text = _exposition(redis_client)
    assert _samples(text, "observatory_telemetry_lost_entries_total") == {
        f'observatory_telemetry_lost_entries_total{{run="{trainer.run_id}",how="dropped"}}': 5,
        f'observatory_telemetry_lost_entries_total{{run="{trainer.run_id}",how="trimmed"}}': 1234}
    assert "observatory_telemetry_lost_entries_all_runs 1239" in text
