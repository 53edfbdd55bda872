"""`manage.py ingest`: ingest wired to live pushes — one coalesced update per run per batch, --once, SIGTERM."""

import signal
import subprocess
import sys

import pytest
from django.core.management import call_command

from observatory import contract
from webapp.metrics.models import Point
from webapp.runs.models import Run

from ..servers import ROOT, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_batch_becomes_one_update_per_run_with_every_new_point(trainer, live_ingest, run_id):
    trainer.send("run", name="demo", config={})
    trainer.send("state", state="training", step=0, detail="")
    for step in range(20):
        trainer.metrics(step, **{contract.M_LOSS: 5.0 - step * 0.1, contract.M_LR: 1e-3})
    trainer.metrics(20, **{contract.M_LOSS: float("nan")})
    assert live_ingest.drain() == 23

    # one update (feature frames such as the NaN's anomaly carry their own "type")
    (pushed_run, body), = [(run, b) for run, b in live_ingest.pushed if "type" not in b]
    assert pushed_run == run_id
    assert body["series"][contract.M_LOSS]["steps"] == list(range(21))
    assert body["series"][contract.M_LOSS]["nonfinite"] == [[20, "NaN"]]
    assert body["series"][contract.M_LR]["steps"] == list(range(20))
    assert body["run"]["state"] == "training"
    assert body["new_series"] == sorted([contract.M_LOSS, contract.M_LR])
    assert [e["name"] for e in body["events"]] == ["training"]


def test_batches_between_two_pushes_coalesce_rewind_first(trainer, redis_client, run_id):
    from webapp.live.pipeline import LiveIngest

    pushed = []
    ing = LiveIngest(redis_client, lambda run, *bodies: pushed.extend(bodies), interval=3600.0)
    for step in range(30):
        trainer.metrics(step, loss=1.0)
    ing.ingestor.drain()
    trainer.send("rewind", from_step=29, to_step=9)
    for step in range(10, 20):
        trainer.metrics(step, loss=2.0)
    ing.ingestor.drain()  # a second batch while the first is still waiting for its push
    ing.flush(force=True)
    (body,) = pushed
    assert body["rewinds"] == [{"from_step": 29, "to_step": 9}]
    assert body["series"]["loss"]["steps"] == list(range(20))
    assert body["series"]["loss"]["values"] == [1.0] * 10 + [2.0] * 10
    assert body["new_series"] == ["loss"]


def test_a_batch_with_an_anomaly_pushes_its_points_at_once_with_the_frame_in_one_message(trainer, redis_client,
                                                                                         run_id):
    """The anomaly frame and the points it sits on leave ingest together, in one message, points first, whatever
    the coalescing interval (two messages were two sends of a web process, its minimum interval apart: 50 ms, and
    two redraws in the browser: bench/liveview.py)."""
    from webapp.live.pipeline import LiveIngest

    messages = []  # one entry per send: the bodies it carried
    ing = LiveIngest(redis_client, lambda run, *bodies: messages.append(bodies), interval=3600.0)
    for step in range(10):
        trainer.metrics(step, **{contract.M_LOSS: 5.0 - step * 0.1})
    ing.ingestor.drain()
    ing.flush()  # the first push of a run is due at once
    assert len(messages) == 1
    trainer.metrics(10, **{contract.M_LOSS: 4.0})
    ing.ingestor.drain()
    ing.flush()
    assert len(messages) == 1  # an ordinary batch waits out the interval
    trainer.metrics(11, **{contract.M_LOSS: float("nan")})
    ing.ingestor.drain()
    assert len(messages) == 2  # not waiting for flush()
    points, frame = messages[1]
    assert "type" not in points and points["series"][contract.M_LOSS]["steps"] == [10, 11]
    assert frame["type"] == "anomaly" and frame["anomalies"][0]["kind"] == "nonfinite"
    ing.flush()
    assert len(messages) == 2


def test_the_ingest_command_processes_once_and_exits(trainer, run_id):
    trainer.send("run", name="cmd", config={})
    trainer.metrics(0, loss=1.0)
    call_command("ingest", "--once")
    assert Run.objects.get(pk=run_id).name == "cmd"
    assert list(Point.objects.filter(series__run_id=run_id).values_list("step", "value")) == [(0, 1.0)]


def test_sigterm_makes_the_ingest_process_exit_cleanly(trainer, live_env):
    proc = subprocess.Popen([sys.executable, "manage.py", "ingest", "--block-ms", "100"], cwd=ROOT, env=live_env,
                            stderr=subprocess.PIPE, text=True)
    try:
        trainer.metrics(0, loss=1.0)
        wait_for(lambda: Point.objects.filter(series__run_id=trainer.run_id).exists(), 60, "ingest to store a point")
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "ingest stopped" in err
