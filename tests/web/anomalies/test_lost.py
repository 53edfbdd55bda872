"""Telemetry lost before ingest read it is an alarm: a critical `telemetry_lost` anomaly in the run's log (pushed
live, one episode until someone triages it), counted in /metrics. Real Redis, real database, ingest in-process."""

from __future__ import annotations

import pytest

from observatory import contract
from observatory.streams import Publisher
from webapp.anomalies.models import Anomaly
from webapp.ops import exposition, probes

pytestmark = pytest.mark.django_db(transaction=True)


def _publish(pub, steps):
    for step in steps:
        pub.metrics(step, {contract.M_LOSS: 1.0})
    assert pub.flush(30)


def test_entries_trimmed_unread_raise_one_critical_anomaly_that_counts_them(redis_url, redis_client, run_id, caps,
                                                                            live_ingest):
    pub = Publisher(redis_url, run_id, batch=100)
    _publish(pub, range(10))
    live_ingest.drain()  # ingest has read the run, then stops reading
    _publish(pub, range(10, 3010))
    live_ingest.drain()
    lost = int(redis_client.hget(contract.telemetry_lost_key(run_id), "trimmed"))
    assert lost >= 1000
    (row,) = Anomaly.objects.filter(run_id=run_id)
    assert (row.kind, row.severity, row.status, row.score) == ("telemetry_lost", "critical", "open", lost)
    assert f"{lost:,} telemetry entries" in row.explanation and "trimmed" in row.explanation
    frames = [body for _, body in live_ingest.pushed if body.get("type") == "anomaly"]
    assert frames and frames[-1]["anomalies"][0]["kind"] == "telemetry_lost"

    _publish(pub, range(3010, 6010))  # more lost while the alarm is still open: the same episode, updated
    pub.close()
    live_ingest.drain()
    total = int(redis_client.hget(contract.telemetry_lost_key(run_id), "trimmed"))
    assert total > lost
    (row,) = Anomaly.objects.filter(run_id=run_id)
    assert row.score == total and row.start_step < row.end_step

    row.status = "acknowledged"
    row.save()
    redis_client.hincrby(contract.telemetry_lost_key(run_id), "dropped", 7)  # as a publisher counts its drops
    redis_client.xadd(contract.telemetry_stream(run_id), contract.encode(run_id, "event", {
        "t": 1.0, "step": 7000, "name": contract.TELEMETRY_LOST_EVENT,
        "payload": {"how": "dropped", "lost": 7, "total": 7, "why": "the publisher's queue was full"}}))
    live_ingest.drain()  # a loss after triage is a new episode
    new = Anomaly.objects.filter(run_id=run_id).exclude(pk=row.pk).get()
    assert new.score == total + 7 and new.start_step == 7000 and "7 dropped" in new.explanation

    text = exposition.render(probes.redis_families(redis_client))
    assert f'observatory_telemetry_lost_entries_total{{run="{run_id}",how="trimmed"}} {total}' in text
