"""Celery tasks that push to browsers: liveness checks whose verdicts open dashboards must see."""

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from webapp.metrics.changes import RunChanges
from webapp.redis import get_redis
from webapp.runs.models import Run


# The name predates the move from webapp.runs: the beat schedule (settings.CELERY_BEAT_SCHEDULE) and messages
# already queued carry it.
@shared_task(name="runs.check_heartbeats")
def check_heartbeats() -> dict[str, str]:
    """Mark watched runs alive/stale/lost from their heartbeat keys; push changes to open dashboards.

    Returns {run_id: new health} for the runs that changed.
    """
    from webapp.live.push import push_now  # channels import kept out of worker start-up

    changed = Run.objects.refresh_health(get_redis(), timezone.now(), settings.OBS_LOST_AFTER_S)
    for run in changed:
        push_now(run.id, RunChanges(run=run.summary()))
    return {run.id: run.health for run in changed}
