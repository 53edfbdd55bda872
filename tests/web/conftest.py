"""Fixtures for the web side: settings pointed at the test Redis database, a fake trainer on a real stream, ingest
in-process (with and without live pushes), server subprocesses, and a Chromium browser."""

from __future__ import annotations

import os
import time
import types

import pytest

from observatory import contract
from webapp.settings import channel_layers

from .servers import ROOT, Servers, free_port, start_web, stop, wait_port

try:
    from tests.conftest import CHROMIUM_ARGS, chromium_path
except ImportError:  # tests/ is not a package: its conftest is importable as a top-level module
    from conftest import CHROMIUM_ARGS, chromium_path


@pytest.fixture(autouse=True)
def web_settings(settings, redis_url):
    """In-process code (ingest, consumers, tasks) reads REDIS_URL/CHANNEL_LAYERS at call time: point them at the
    test database (settings were imported before the shared redis_url fixture set the environment)."""
    settings.REDIS_URL = redis_url
    settings.OBS_CONTROL_KEY = contract.load_control_key()  # the key tests/conftest.py gives every process
    settings.CHANNEL_LAYERS = channel_layers(redis_url)  # as the server processes it starts derive them
    return settings


@pytest.fixture(autouse=True)
def ratelimit_clock(monkeypatch):
    """The in-process rate limits (django_ratelimit: 429s) count in fixed windows of the wall clock; their clock is
    held for each test, so that a test's requests, however slow a busy box makes them, never straddle a window's end
    (a count that started again there let the export limit's 61st request through: seen once in a clean-clone CI
    run, 12-05). Child processes (the browser tests' servers) keep the real clock."""
    from django_ratelimit import core

    now = time.time()
    monkeypatch.setattr(core, "time", types.SimpleNamespace(time=lambda: now))


class Trainer:
    """Publishes to a run's telemetry stream the way the trainer's publisher does (contract helpers, SADD)."""

    def __init__(self, client, run_id):
        self.r, self.run_id = client, run_id
        self.stream = contract.telemetry_stream(run_id)
        client.sadd(contract.RUNS_KEY, run_id)

    def send(self, kind, **data):
        data.setdefault("t", 1_700_000_000.0)
        return self.r.xadd(self.stream, contract.encode(self.run_id, kind, data))

    def metrics(self, step, **values):
        return self.r.xadd(self.stream, contract.metrics_fields(self.run_id, step, values))

    def metrics_named(self, step, values: dict):
        return self.r.xadd(self.stream, contract.metrics_fields(self.run_id, step, values))

    def raw(self, fields):
        return self.r.xadd(self.stream, fields)


@pytest.fixture
def trainer(redis_client, run_id):
    return Trainer(redis_client, run_id)


@pytest.fixture
def ingestor(redis_client):
    """metrics' Ingestor; `.changes` lists what each committed batch changed ({run id: RunChanges})."""
    from webapp.metrics.ingest import Ingestor

    changes = []
    ing = Ingestor(redis_client, on_changes=changes.append, consumer="test-ingest")
    ing.changes = changes
    return ing


@pytest.fixture
def live_ingest(redis_client):
    """Ingest wired to live pushes as `manage.py ingest` runs it, pushing every batch at once; `.pushed` lists the
    (run id, update body) pairs it sent."""
    from webapp.live.pipeline import LiveIngest

    pushed = []
    ing = LiveIngest(redis_client, lambda run, *bodies: pushed.extend((run, b) for b in bodies),
                     consumer="test-ingest", interval=0.0)
    ing.pushed = pushed
    return ing


def _child_env(redis_url: str) -> dict:
    from django.db import connection

    d = connection.settings_dict
    if connection.vendor == "sqlite":
        db_url = f"sqlite:///{d['NAME']}"
    else:
        db_url = f"postgres://{d['USER']}:{d['PASSWORD']}@{d['HOST'] or '127.0.0.1'}:{d['PORT'] or 5432}/{d['NAME']}"
    return {**os.environ, "DATABASE_URL": db_url, "REDIS_URL": redis_url, "OBS_DEBUG": "1",
            "PYTHONPATH": str(ROOT), "DJANGO_SETTINGS_MODULE": "webapp.settings", "PYTHONUNBUFFERED": "1"}


@pytest.fixture
def live_env(redis_url, transactional_db):
    """Environment for child processes (ingest, uvicorn) that must share the test database and Redis."""
    return _child_env(redis_url)


@pytest.fixture(scope="session")
def push_web(redis_url, django_db_setup):
    """The web server (uvicorn) on the test database and Redis, for the session: the push tier's nginx asks it who
    may subscribe (deploy/push.conf's nchan_authorize_request: a run stored, or with a live log). Its port."""
    port = free_port()
    proc = start_web(port, _child_env(redis_url))
    try:
        wait_port(port, proc=proc)
        yield port
    finally:
        stop(proc)


@pytest.fixture
def servers(live_env):
    """ingest + uvicorn subprocesses on the test database and Redis; stopped after the test."""
    s = Servers(live_env)
    yield s
    s.close()


@pytest.fixture
def new_page():
    """new_page(**options) -> a page in Debian's Chromium (Playwright), launched on first use: call it after the
    test's database work, since Playwright's sync API runs an event loop in this thread, where Django refuses
    database calls. Skipped, with the reason, where Chromium is not installed."""
    if chromium_path() is None:
        pytest.skip("no Chromium installed (apt-get install -y chromium); CI installs it")
    sync_api = pytest.importorskip("playwright.sync_api")
    running = {}

    def open_page(**options):
        if not running:
            running["pw"] = sync_api.sync_playwright().start()
            running["browser"] = running["pw"].chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        return running["browser"].new_page(**options)

    yield open_page
    if running:
        running["browser"].close()
        running["pw"].stop()
