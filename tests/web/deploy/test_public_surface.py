"""Nothing public that should not be (issue 22): /metrics for operators or a scrape token, no host names or PIDs in
/metrics, /healthz or public run detail, too many query or form fields answered 400 in every mode."""

from __future__ import annotations

import os
import re
import socket

import pytest
from django.test import Client

from observatory import contract
from webapp.live.reporting import StatsReporter

from ..accounts.conftest import make_user

HOST = socket.gethostname()
DATA_HOST = "trainer-node-7f3a9c.internal"  # a host name only the data below carries


def names_host(text: str) -> bool:
    """This machine's host name as a word (a short one such as "vm" also turns up inside CSRF tokens)."""
    return re.search(rf"(?<![A-Za-z0-9]){re.escape(HOST)}(?![A-Za-z0-9])", text) is not None
PID = 4_194_301  # a pid no test process has: where it shows, it came from the data
CONSUMER = f"ingest-{HOST}-{PID}"  # manage.py ingest's default consumer name


@pytest.fixture
def operator_client(db):
    c = Client()
    c.force_login(make_user("metrics-op", "operator"))
    return c


@pytest.fixture
def member_client(db):
    c = Client()
    c.force_login(make_user("metrics-member"))
    return c


def test_metrics_refuses_the_public_and_members_without_the_token(client, member_client, db, settings):
    settings.OBS_METRICS_TOKEN = None
    anon = client.get("/metrics")
    assert anon.status_code == 401 and anon["WWW-Authenticate"] == "Bearer"
    assert "error" in anon.json()
    assert member_client.get("/metrics").status_code == 403


def test_metrics_answers_operators_and_the_scrape_token_only(client, operator_client, db, redis_client, settings):
    settings.OBS_METRICS_TOKEN = "scrape-s3cret"
    assert operator_client.get("/metrics").status_code == 200
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-s3cret").status_code == 200
    for bad in ("Bearer scrape-s3cre", "Bearer ", "Basic scrape-s3cret", "Bearer scrape-s3cret-and-more"):
        assert client.get("/metrics", HTTP_AUTHORIZATION=bad).status_code == 401, bad


def test_the_scrape_token_comes_from_the_environment_or_a_file(tmp_path, monkeypatch):
    from django.core.exceptions import ImproperlyConfigured

    from webapp.settings import env_secret

    (tmp_path / "tok").write_text("from-a-file\n")
    monkeypatch.setenv("OBS_METRICS_TOKEN_FILE", str(tmp_path / "tok"))
    assert env_secret("OBS_METRICS_TOKEN") == "from-a-file"
    monkeypatch.setenv("OBS_METRICS_TOKEN", "both")
    with pytest.raises(ImproperlyConfigured):
        env_secret("OBS_METRICS_TOKEN")


def test_metrics_holds_no_host_name_or_pid(operator_client, redis_client, trainer, ingestor):
    trainer.metrics(0, loss=1.0)
    ingestor.drain()
    StatsReporter(redis_client, CONSUMER).maybe_report({"points": 7, "entries": 1})
    StatsReporter(redis_client, "ingest-b").maybe_report({"points": 9, "entries": 2})
    text = operator_client.get("/metrics").content.decode()
    assert not names_host(text) and str(PID) not in text and str(os.getpid()) not in text
    replicas = set(re.findall(r'observatory_ingest_points_total\{consumer="([^"]+)"\}', text))
    assert len(replicas) == 2 and all(re.fullmatch(r"r[0-9a-f]{10}", r) for r in replicas), replicas


def test_healthz_holds_no_host_name_address_or_path_when_a_dependency_fails(client, db, settings):
    settings.REDIS_URL = f"redis://{HOST}:1/0"  # refused: redis-py's message would name the host and port
    resp = client.get("/healthz")
    assert resp.status_code == 503
    body = resp.content.decode()
    assert not names_host(body) and ":1" not in body and "/" not in resp.json()["redis"]
    assert resp.json()["redis"] == "unavailable (ConnectionError)"


HEARTBEAT = {"phase": "compute", "step": 3, "tokens": 100, "token_budget": 1000, "eta_s": 5.0, "steps_per_s": 2.0,
             "since_step_s": 0.1, "pid": PID, "hostname": DATA_HOST}


@pytest.fixture
def beating_run(db):
    from webapp.runs.models import Run, RunEvent

    run = Run.objects.create(id="pid-run", name="pid-run", heartbeat=HEARTBEAT, last_step=3,
                             config={"train": {"lr": 0.1}, "host": DATA_HOST, "pid": PID})
    RunEvent.objects.create(run=run, kind="event", name="resumed", step=3, entry_id="1-0",
                            payload={"pid": PID, "directory": f"/home/{DATA_HOST}/ckpt"})
    return run


@pytest.mark.parametrize("path", ["/api/runs/pid-run/", "/api/v1/runs/pid-run/events/", "/runs/pid-run/",
                                  "/api/v1/runs/pid-run/records.json"])
def test_public_run_detail_holds_no_pid_host_name_or_host_path(client, member_client, beating_run, path):
    for who in (client, member_client):
        resp = who.get(path)
        assert resp.status_code == 200
        body = b"".join(resp.streaming_content) if resp.streaming else resp.content
        text = body.decode()
        assert str(PID) not in text and DATA_HOST not in text, path
        assert '"pid"' not in text


def test_operators_still_read_the_full_record(operator_client, beating_run):
    body = operator_client.get("/api/runs/pid-run/").json()
    assert body["heartbeat"]["pid"] == PID and body["full_detail"] is True


def test_the_public_still_reads_the_heartbeats_progress(client, beating_run):
    body = client.get("/api/runs/pid-run/").json()
    assert body["heartbeat"]["tokens"] == 100 and body["progress"]["eta_s"] == 5.0


# ---------------------------------------------------------------------------------------------- field limits
FIELDS = "&".join(f"f{i}=1" for i in range(1_001))  # over DATA_UPLOAD_MAX_NUMBER_FIELDS (1,000)


@pytest.mark.parametrize("debug", [False, True])
@pytest.mark.parametrize("path", ["/api/runs/", "/api/v1/runs/x/export.csv", "/", "/healthz", "/accounts/login/"])
def test_too_many_query_fields_are_a_400_in_every_mode(client, db, settings, debug, path):
    settings.DEBUG = debug
    resp = client.get(f"{path}?{FIELDS}")
    assert resp.status_code == 400, resp.content[:300]
    assert b"1000" in resp.content and b"Traceback" not in resp.content


@pytest.mark.parametrize("debug", [False, True])
def test_too_many_form_fields_and_an_oversized_body_are_400_and_413(client, db, settings, debug):
    settings.DEBUG = debug
    resp = client.post("/accounts/login/", FIELDS, content_type="application/x-www-form-urlencoded")
    assert resp.status_code == 400 and b"1000" in resp.content
    big = b"x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1)
    resp = client.post("/accounts/login/", big, content_type="application/x-www-form-urlencoded")
    assert resp.status_code == 413
    resp = client.post("/api/runs/x/annotations/", big, content_type="application/json")
    assert resp.status_code == 413 and resp.json()["code"] == "too_large"
