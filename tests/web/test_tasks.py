"""Celery tasks, called directly: check_heartbeats marks runs alive / stale / lost from their heartbeat keys."""

import datetime as dt

import pytest
from django.utils import timezone

from observatory import contract
from webapp.runs.models import Run
from webapp.runs.tasks import check_heartbeats

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
