"""/healthz and /metrics (webapp.ops), the JSON log format, and the series API's caps on its parameters."""

from __future__ import annotations

import json
import logging

import pytest

from observatory import contract
from webapp.live.reporting import StatsReporter

from ..servers import free_port


@pytest.fixture
def api_run(db):
    from webapp.runs.models import Run

    return Run.objects.create(id="ops-run", name="ops-run")


def test_healthz_is_200_json_when_the_database_and_redis_answer(client, db, redis_client):
    resp = client.get("/healthz")
    assert resp.status_code == 200
    assert resp.json()["status"] == "ok" and resp.json()["database"] == "ok" and resp.json()["redis"] == "ok"
    assert "no-cache" in resp["Cache-Control"]
    assert set(resp.json()) == {"status", "database", "redis", "ingest_lag", "live_lag"}  # no uptime for the public
    assert resp.json()["live_lag"] == "ok (no push tier)"  # the hub reads the live logs in each web process


def test_healthz_is_503_when_redis_is_down(client, db, settings):
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"
    resp = client.get("/healthz")
    assert resp.status_code == 503
    body = resp.json()
    assert body["status"] == "unavailable" and body["database"] == "ok" and "Connection" in body["redis"]


def test_metrics_exposes_ingest_lag_dead_letters_ingest_counters_and_websocket_numbers(client, db, redis_client,
                                                                                       trainer, ingestor, settings):
    from webapp.ops.exposition import replica_id

    settings.OBS_METRICS_TOKEN = "scrape-token"
    trainer.metrics(0, loss=1.0)
    ingestor.drain()
    trainer.metrics(1, loss=1.0)
    trainer.metrics(2, loss=1.0)  # two entries not yet read
    redis_client.hincrby(contract.DEADLETTER_COUNT_KEY, "bad_json", 3)
    StatsReporter(redis_client, "ingest-a").maybe_report({"points": 1234, "entries": 56, "note": "x"})
    resp = client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-token")
    assert resp.status_code == 200 and resp["Content-Type"].startswith("text/plain; version=0.0.4")
    text = resp.content.decode()
    assert f'observatory_ingest_lag_entries{{run="{trainer.run_id}"}} 2' in text
    assert 'observatory_deadletters_total{reason="bad_json"} 3' in text
    replica = replica_id("ingest-a", settings.SECRET_KEY)  # a process is named by its replica id only
    assert f'observatory_ingest_points_total{{consumer="{replica}"}} 1234.0' in text
    assert "observatory_redis_up 1" in text and "observatory_database_up 1" in text
    for family in ("observatory_ws_clients", "observatory_ws_frames_sent_total",
                   "observatory_live_push_delay_seconds_bucket", "observatory_live_relay_delay_seconds_count"):
        assert family in text
    for line in text.splitlines():  # every sample line is "name{labels} number"
        if line and not line.startswith("#"):
            float(line.rsplit(" ", 1)[1].replace("+Inf", "inf").replace("NaN", "nan"))


def test_metrics_wants_the_bearer_token_when_one_is_configured(client, db, redis_client, settings):
    settings.OBS_METRICS_TOKEN = "s3cret-token"
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret-token").status_code == 200


def test_the_json_log_format_writes_one_object_per_record():
    from webapp.ops.logs import JsonFormatter

    rec = logging.LogRecord("observatory.live", logging.WARNING, __file__, 1, "slow %s", ("socket",), None)
    out = json.loads(JsonFormatter().format(rec))
    assert out["level"] == "WARNING" and out["logger"] == "observatory.live" and out["message"] == "slow socket"


@pytest.mark.parametrize("query", ["points=1000000000", "points=" + "9" * 5000, "start=-5", "end=x"])
def test_the_series_api_answers_absurd_parameters_with_a_clear_400(client, api_run, query):
    resp = client.get(f"/api/runs/{api_run.id}/metrics/loss/?{query}")
    assert resp.status_code == 400
    assert "parameter" in resp.json()["error"]
