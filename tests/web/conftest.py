"""Fixtures for the web side: settings pointed at the test Redis database, stream helpers, an in-process ingest."""

from __future__ import annotations

import pytest

from observatory import contract


@pytest.fixture(autouse=True)
def web_settings(settings, redis_url):
    """In-process code (ingest, consumers, tasks) reads REDIS_URL/CHANNEL_LAYERS at call time: point them at the
    test database (settings were imported before the shared redis_url fixture set the environment)."""
    settings.REDIS_URL = redis_url
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
                                           "CONFIG": {"hosts": [redis_url]}}}
    return settings


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
    from webapp.live.push import LiveBuffer
    from webapp.metrics.ingest import Ingestor

    pushed = []
    buf = LiveBuffer(lambda run, payload: pushed.append((run, payload)), interval=0.0)
    ing = Ingestor(redis_client, buf, consumer="test-ingest")
    ing.pushed = pushed
    return ing


@pytest.fixture
def live_env(redis_url, transactional_db):
    """Environment for child processes (ingest, daphne) that must share the test database and Redis."""
    import os

    from django.db import connection

    d = connection.settings_dict
    if connection.vendor == "sqlite":
        db_url = f"sqlite:///{d['NAME']}"
    else:
        db_url = f"postgres://{d['USER']}:{d['PASSWORD']}@{d['HOST'] or '127.0.0.1'}:{d['PORT'] or 5432}/{d['NAME']}"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return {**os.environ, "DATABASE_URL": db_url, "REDIS_URL": redis_url, "OBS_DEBUG": "1",
            "PYTHONPATH": root, "DJANGO_SETTINGS_MODULE": "webapp.settings", "PYTHONUNBUFFERED": "1"}
