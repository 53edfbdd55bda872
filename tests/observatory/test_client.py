"""The client library in Redis mode: what a plain training loop publishes, against a real Redis."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import observatory.client as obs
from observatory import contract
from tests.support import free_port

ROOT = Path(__file__).resolve().parents[2]


def _entries(client, run_id):
    return [contract.decode(f, expect_run=run_id) for _, f in client.xrange(contract.telemetry_stream(run_id))]


def _wait(condition, timeout, what):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_a_run_publishes_its_lifecycle_metrics_events_and_heartbeats(redis_url, redis_client, run_id):
    run = obs.init(name="exp", config={"lr": 3e-4, "layers": (2, 4)}, run_id=run_id, url=redis_url,
                   heartbeat_s=0.05, finish_at_exit=False)
    assert run.mode == "redis" and run.id == run_id
    for _ in range(3):
        run.log({contract.M_LOSS: 2.0, contract.M_TOTAL_TOKENS: 4096})  # steps 0, 1, 2
    assert run.log({contract.M_LOSS: float("nan"), contract.M_GRAD_NORM: float("inf")}, step=10) == 10
    assert run.log({contract.M_LOSS: np.float32(1.5)}) == 11
    run.event("eval_done", {"score": np.int64(3)})
    _wait(lambda: sum(m.kind == "heartbeat" for m in _entries(redis_client, run_id)) >= 3, 10, "heartbeats")
    assert run.finish() and run.finish()  # the second call does nothing
    msgs = _entries(redis_client, run_id)
    assert [m.kind for m in msgs[:2]] == ["run", "state"] and msgs[1].data["state"] == "training"
    info = msgs[0].data
    assert info["name"] == "exp" and info["config"] == {"lr": 3e-4, "layers": [2, 4]} and info["run_id"] == run_id
    assert isinstance(info["pid"], int) and info["started_at"] <= time.time()
    metrics = [m.data for m in msgs if m.kind == "metrics"]
    assert [d["step"] for d in metrics] == [0, 1, 2, 10, 11]
    assert math.isnan(metrics[3]["values"][contract.M_LOSS]) and metrics[3]["values"][contract.M_GRAD_NORM] == math.inf
    assert metrics[4]["values"] == {contract.M_LOSS: 1.5}
    (event,) = [m.data for m in msgs if m.kind == "event"]
    assert event["name"] == "eval_done" and event["step"] == 11 and event["payload"] == {"score": 3}
    beats = [m.data for m in msgs if m.kind == "heartbeat"]
    assert {"phase", "step", "tokens", "eta_s", "steps_per_s", "since_step_s", "pid"} <= set(beats[-1])
    assert beats[-1]["phase"] == "stopped" and beats[-1]["step"] == 11 and beats[-1]["tokens"] == 4096
    assert beats[-1]["eta_s"] is None and beats[-1]["steps_per_s"] >= 0
    assert msgs[-2].kind == "state" and msgs[-2].data["state"] == "stopped"
    assert json.loads(redis_client.get(contract.heartbeat_key(run_id)))["phase"] == "stopped"
    assert redis_client.sismember(contract.RUNS_KEY, run_id)
    st = run.stats()
    assert st["dropped"] == 0 and st["invalid"] == 0 and st["queue_depth"] == 0 and st["skipped"] == 0


def test_values_that_are_not_numbers_are_skipped_and_counted(redis_url, redis_client, run_id):
    with obs.init(name="exp", run_id=run_id, url=redis_url, finish_at_exit=False) as run:
        run.log({contract.M_LOSS: 1.0, "note": "hello", "hist": [1, 2], "nested": {"a": 1}, "none": None,
                 "bad name!": 1.0, "flag": True, "arr": np.array([1.0, 2.0])})
        run.log({"only text": "x"})  # nothing numeric: no record, the step still advances
        run.log({contract.M_LOSS: 0.5})
    metrics = [m.data for m in _entries(redis_client, run_id) if m.kind == "metrics"]
    assert [(d["step"], d["values"]) for d in metrics] == [(0, {contract.M_LOSS: 1.0, "flag": 1.0}),
                                                          (2, {contract.M_LOSS: 0.5})]
    assert run.stats()["skipped"] == 7


def test_a_run_with_more_names_than_one_record_holds_is_split_at_the_same_step(redis_url, redis_client, run_id):
    n = contract.MAX_METRICS_PER_RECORD + 10
    with obs.init(name="wide", run_id=run_id, url=redis_url, finish_at_exit=False) as run:
        run.log({f"layer/{i}": float(i) for i in range(n)}, step=3)
    metrics = [m.data for m in _entries(redis_client, run_id) if m.kind == "metrics"]
    assert [d["step"] for d in metrics] == [3, 3] and sum(len(d["values"]) for d in metrics) == n


def test_the_context_manager_marks_a_run_that_raised_as_failed(redis_url, redis_client, run_id):
    with pytest.raises(ZeroDivisionError):
        with obs.init(name="exp", run_id=run_id, url=redis_url, finish_at_exit=False) as run:
            run.log({contract.M_LOSS: 1.0})
            1 / 0
    states = [m.data for m in _entries(redis_client, run_id) if m.kind == "state"]
    assert [s["state"] for s in states] == ["training", "failed"]
    assert states[-1]["detail"].startswith("ZeroDivisionError") and states[-1]["step"] == 0


def test_update_config_publishes_the_run_again(redis_url, redis_client, run_id):
    with obs.init(name="exp", config={"lr": 1}, run_id=run_id, url=redis_url, finish_at_exit=False) as run:
        run.update_config({"batch": 8})
    infos = [m.data for m in _entries(redis_client, run_id) if m.kind == "run"]
    assert [i["config"] for i in infos] == [{"lr": 1}, {"lr": 1, "batch": 8}]
    assert infos[0]["started_at"] == infos[1]["started_at"]


def test_run_ids_default_to_the_name_and_are_validated(monkeypatch):
    monkeypatch.setenv("REDIS_URL", f"redis://127.0.0.1:{free_port()}/0")
    assert re.fullmatch(r"my-exp_1-[0-9a-f]{8}", obs.default_run_id("my exp_1"))
    assert re.fullmatch(r"run-[0-9a-f]{8}", obs.default_run_id("!!!"))
    assert contract.RUN_ID_RE.match(obs.default_run_id("x" * 200))
    with pytest.raises(ValueError, match="bad run id"):
        obs.init(name="x", run_id="no spaces allowed")
    with pytest.raises(ValueError, match="token"):
        obs.init(name="x", url="https://observatory.example")
    with pytest.raises(ValueError, match="http"):
        obs.init(name="x", url="ftp://x")
    monkeypatch.setenv("OBS_URL", "http://127.0.0.1:9")
    with pytest.raises(ValueError, match="OBS_TOKEN"):
        obs.init(name="x")
    with pytest.raises(ValueError, match="step"):
        run = obs.init(name="x", run_id="env-redis", url=f"redis://127.0.0.1:{free_port()}/0",
                       finish_at_exit=False)
        try:
            run.log({"a": 1.0}, step=-1)
        finally:
            run.finish(timeout=0.1)


def test_logging_never_blocks_when_redis_is_absent_and_drops_are_counted():
    run = obs.init(name="offline", url=f"redis://127.0.0.1:{free_port()}/0", max_queue=500, finish_at_exit=False)
    # (no clock: a call that waited would show as the drops not counted below; timings are benchmarks')
    for step in range(3000):
        run.log({contract.M_LOSS: float(step)})
    assert run.finish(timeout=0.2) is False
    st = run.stats()
    assert st["dropped_by_kind"]["metrics"] >= 2500 and st["published"] == 0 and not st["connected"]


SCRIPT = """
import observatory.client as obs
run = obs.init(name="crashy", run_id={run_id!r})
run.log({{"train/loss": 1.0}})
raise RuntimeError("diverged")
"""


def test_a_script_killed_by_an_exception_is_finished_as_failed_at_exit(redis_url, redis_client, run_id, tmp_path):
    script = tmp_path / "crashy.py"
    script.write_text(SCRIPT.format(run_id=run_id))
    proc = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, timeout=60,
                          env={"REDIS_URL": redis_url, "PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 1 and b"RuntimeError: diverged" in proc.stderr
    states = [m.data for m in _entries(redis_client, run_id) if m.kind == "state"]
    assert [s["state"] for s in states] == ["training", "failed"] and "diverged" in states[-1]["detail"]
