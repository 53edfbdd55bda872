"""The public JSON API for runs: the list, a run's detail with its events, read-only."""

import pytest

from webapp.runs.models import Run, RunEvent

pytestmark = pytest.mark.django_db

@pytest.fixture
def run():
    run = Run.objects.create(id="r1", name="demo run", state="training", last_step=9)
    RunEvent.objects.create(run=run, kind="event", name="checkpoint_saved", step=5)
    return run

def test_api_lists_runs(client, run):
    body = client.get("/api/runs/").json()
    (r,) = body["runs"]
    assert {k: r[k] for k in ("id", "name", "state", "last_step")} == {
        "id": "r1", "name": "demo run", "state": "training", "last_step": 9}
    assert "started_at" in r and r["updated_at"]

def test_api_run_detail_includes_events(client, run):
    body = client.get("/api/runs/r1/").json()
    assert body["id"] == "r1" and body["events"][0]["name"] == "checkpoint_saved"
    assert body["last_event_id"] == body["events"][0]["id"]

def test_api_is_read_only(client, run):
    assert client.post("/api/runs/").status_code == 405
