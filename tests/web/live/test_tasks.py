"""Celery tasks, called directly: check_heartbeats marks runs alive / stale / lost from their heartbeat keys and
pushes the change to open dashboards."""

import datetime as dt

import pytest
from django.utils import timezone

from observatory import contract
from webapp.live.tasks import check_heartbeats
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db(transaction=True)


def test_check_heartbeats_marks_silent_runs_stale_then_lost_and_live_ones_alive(redis_client, settings):
    now = timezone.now()
    Run.objects.create(id="beating", state="training", health="stale", last_heartbeat_at=now - dt.timedelta(hours=1))
    redis_client.set(contract.heartbeat_key("beating"), "{}", ex=contract.HEARTBEAT_TTL_S)
    Run.objects.create(id="hung", state="training", health="alive", last_heartbeat_at=now - dt.timedelta(seconds=90))
    Run.objects.create(id="dead", state="paused", health="alive", last_heartbeat_at=now - dt.timedelta(hours=2))
    Run.objects.create(id="done", state="stopped", health="alive", last_heartbeat_at=now - dt.timedelta(hours=2))
    Run.objects.create(id="fresh", state="training", health="alive", last_heartbeat_at=now - dt.timedelta(seconds=3))

    changed = check_heartbeats()

    assert changed == {"beating": "alive", "hung": "stale", "dead": "lost", "done": "ended"}
    assert dict(Run.objects.values_list("id", "health")) == {
        "beating": "alive", "hung": "stale", "dead": "lost", "done": "ended", "fresh": "alive"}
    assert check_heartbeats() == {}  # nothing changes twice


def test_the_beat_schedule_runs_check_heartbeats_every_ten_seconds():
    from webapp.celery import app

    entry = app.conf.beat_schedule["check-heartbeats"]
    assert entry["task"] == "runs.check_heartbeats" and entry["schedule"] <= 10
    assert "runs.check_heartbeats" in app.tasks


async def test_a_health_change_reaches_an_open_dashboard(redis_client):
    from channels.db import database_sync_to_async
    from channels.testing import WebsocketCommunicator

    from webapp.asgi import application

    await database_sync_to_async(Run.objects.create)(id="hung", state="training", health="alive",
                                                     last_heartbeat_at=timezone.now() - dt.timedelta(seconds=90))
    comm = WebsocketCommunicator(application, "/ws/runs/hung/", headers=[(b"origin", b"http://127.0.0.1:8000")])
    assert (await comm.connect(timeout=5))[0]
    assert (await comm.receive_json_from(timeout=5))["type"] == "hello"
    assert await database_sync_to_async(check_heartbeats)() == {"hung": "stale"}
    update = await comm.receive_json_from(timeout=5)
    assert (update["type"], update["run"]["health"], update["series"]) == ("update", "stale", {})
    await comm.disconnect()
