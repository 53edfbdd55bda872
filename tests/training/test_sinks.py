"""Sinks: JSONL mirror round trip, failure isolation, W&B offline mirror read back by the web's W&B reader."""

from __future__ import annotations

import glob
import logging
import math
import os
import threading

import pytest

from tests.support import wait_for
from training.sinks import CompositeSink, JsonlSink, Sink, WandbSink, resolve_wandb_mode
from webapp.transfer.wandb_file import BLOCK, HEADER, RECORD, WandbReadError, read_run


@pytest.fixture
def wandb_env(tmp_path, monkeypatch):
    """No W&B settings from the developer's environment; W&B's own dirs under tmp."""
    for var in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_DIR", "WANDB_PROJECT", "WANDB_ENTITY", "WANDB_RUN_ID"):
        monkeypatch.delenv(var, raising=False)
    for var in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR", "WANDB_ARTIFACT_DIR"):
        monkeypatch.setenv(var, str(tmp_path / var.lower()))
    return tmp_path


def test_jsonl_round_trip_keeps_every_record_and_non_finite_values(tmp_path, jsonl):
    path = tmp_path / "m" / "metrics.jsonl"
    sink = JsonlSink(path)
    sink.record("state", {"state": "training", "step": 0, "detail": ""})
    for step in range(5):
        sink.log({"train/loss": 1.0 / (step + 1), "grad/norm/total": float("nan") if step == 3 else 0.5}, step)
    sink.event("lr_replan", 4, {"old_total": 10, "new_total": 8})
    sink.log_summary({"final_loss": 0.2})
    sink.finish()
    sink.finish()  # idempotent
    JsonlSink(path).log({"train/loss": float("inf")}, 5)  # a resumed run appends
    with open(path, "a") as f:
        f.write('{"kind": "metrics", "step": 6, "val')  # torn by kill -9
    recs = jsonl(path)
    assert [r["kind"] for r in recs] == ["state"] + ["metrics"] * 5 + ["event", "summary", "metrics"]
    assert recs[2]["values"]["train/loss"] == 0.5 and recs[2]["step"] == 1
    assert math.isnan(recs[4]["values"]["grad/norm/total"])
    assert recs[6] == {**recs[6], "name": "lr_replan", "step": 4, "payload": {"old_total": 10, "new_total": 8}}
    assert recs[-1]["values"]["train/loss"] == math.inf


class Broken(Sink):
    def log(self, metrics, step):
        raise RuntimeError("boom")


def test_composite_isolates_a_failing_sink(tmp_path, jsonl, caplog):
    path = tmp_path / "x.jsonl"
    sink = CompositeSink([Broken(), JsonlSink(path)])
    with caplog.at_level(logging.WARNING, logger="training"):
        for step in range(3):
            sink.log({"a": 1.0}, step)
        sink.finish()
    assert len(jsonl(path)) == 3
    assert sink.errors == {0: 3}
    assert [r.levelname for r in caplog.records if "boom" in r.getMessage()] == ["WARNING"]


def test_wandb_mode_is_offline_unless_configured(monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    assert resolve_wandb_mode() == "offline"
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    assert resolve_wandb_mode() == "online"
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert resolve_wandb_mode() == "disabled" and resolve_wandb_mode("offline") == "offline"


def cut_inside_a_record(data: bytes, at: int) -> int:
    """A crash's cut in the middle of the first record at or after byte `at`: a fixed fraction of the file could
    land on a record's end or in a block's zero padding (where W&B flushed), leaving no visible tear."""
    pos = HEADER.size
    while pos < len(data):
        left = BLOCK - pos % BLOCK
        crc, n, rtype = RECORD.unpack_from(data, pos) if left >= RECORD.size else (0, 0, 0)
        if n == 0:  # a block's trailer or its zero-filled rest
            pos += left
        elif pos >= at and n >= 2:
            return pos + RECORD.size + n // 2
        else:
            pos += RECORD.size + n
    raise AssertionError(f"no record after byte {at}")



def test_wandb_offline_mirror_is_read_back_with_the_same_values(wandb_env):
    sink = WandbSink("observatory", "run-abc", {"model": {"d": 64}, "lr": 3e-3}, dir=wandb_env, name="demo")
    assert sink.mode == "offline"
    sent = []
    for step in range(200):
        values = {"train/loss": 5.0 / (step + 1), "optim/learning_rate": 1e-3 * step}
        if step == 50:
            values["train/loss"] = float("nan")
        sink.log(values, step)
        sent.append(values)
    sink.log({"train/loss": 1.0}, 10)  # after a rewind: cannot go back in a W&B run, counted
    sink.event("lr_replan", 120, {"new_total_steps": 150})
    sink.log_summary({"final": 1.5})
    sink.finish()
    assert sink.stats()["logged"] == 200 and sink.stats()["rewound"] == 1 and sink.stats()["errors"] == 0
    files = glob.glob(str(wandb_env / "wandb" / "offline-run-*" / "run-*.wandb"))
    assert len(files) == 1
    wait_for(lambda: read_run(os.path.dirname(files[0]))["exit_code"] is not None, 60, "W&B to write the run out")
    run = read_run(os.path.dirname(files[0]))
    assert run["run_id"] == "run-abc" and run["name"] == "demo" and run["project"] == "observatory"
    assert run["config"] == {"model": {"d": 64}, "lr": 3e-3} and run["skipped"] == []
    assert [r["_step"] for r in run["history"]] == list(range(200))
    for row, values in zip(run["history"], sent):
        for k, v in values.items():
            assert (math.isnan(v) and math.isnan(row[k])) or row[k] == v
    assert run["summary"]["final"] == 1.5 and run["summary"]["events/lr_replan"]["step"] == 120
    # a run crashed mid-write: the readable prefix comes back and the damage is reported
    data = open(files[0], "rb").read()
    crashed = wandb_env / "crashed"
    crashed.mkdir()
    (crashed / "run-run-abc.wandb").write_bytes(data[: cut_inside_a_record(data, len(data) * 2 // 3)])
    partial = read_run(str(crashed))
    assert 50 < len(partial["history"]) < 200 and partial["skipped"]
    assert partial["history"] == run["history"][: len(partial["history"])]
    # a flipped byte loses one block, not the rest of the run
    bad = bytearray(data)
    bad[len(data) // 3] ^= 0xFF
    (crashed / "run-run-abc.wandb").write_bytes(bytes(bad))
    damaged = read_run(str(crashed))
    assert any("checksum" in s for s in damaged["skipped"])
    assert damaged["history"][-1]["_step"] == 199 and len(damaged["history"]) < 200


def test_wandb_sink_never_blocks_and_counts_drops(wandb_env, monkeypatch):
    import wandb

    # W&B stuck (here: in init) for as long as the training thread logs: a full queue drops, it never waits.
    stuck, real_init = threading.Event(), wandb.init
    monkeypatch.setattr(wandb, "init", lambda **kw: stuck.wait() and real_init(**kw))
    sink = WandbSink("observatory", "r2", dir=wandb_env, mode="disabled", queue_size=10)
    logger = threading.Thread(target=lambda: [sink.log({"x": float(step)}, step) for step in range(5000)])
    logger.start()
    logger.join(60)  # only a guard: a blocking log() would still be inside it
    assert not logger.is_alive()
    stuck.set()
    sink.finish()
    assert sink.stats()["dropped"] == 4990 and sink.stats()["logged"] == 10


def test_wandb_init_failure_is_reported_once_and_training_goes_on(wandb_env, caplog):
    with caplog.at_level(logging.WARNING, logger="training"):
        sink = WandbSink("observatory", "r3", dir=wandb_env, mode="no-such-mode")
        for step in range(3):
            sink.log({"x": 1.0}, step)
        sink.finish()
    assert sink.stats()["errors"] == 1 and sink.stats()["dropped"] == 3
    assert len([r for r in caplog.records if "wandb sink" in r.getMessage()]) == 1


def test_reader_rejects_what_is_not_a_run(tmp_path):
    with pytest.raises(WandbReadError):
        read_run(str(tmp_path))
    (tmp_path / "run-x.wandb").write_bytes(b"not a wandb file at all")
    with pytest.raises(WandbReadError, match="bad header"):
        read_run(str(tmp_path))


def test_a_failed_wandb_init_is_tried_again_and_the_mirror_written(wandb_env, monkeypatch):
    import wandb

    # A transient failure of W&B's init (CI met CPython's "AST constructor recursion depth mismatch" there, another
    # thread parsing code at the same moment): the next try opens the run, and nothing logged meanwhile is lost.
    real_init, calls = wandb.init, []

    def flaky(**kw):
        calls.append(1)
        if len(calls) == 1:
            raise SystemError("AST constructor recursion depth mismatch (before=204, after=45)")
        return real_init(**kw)

    monkeypatch.setattr(wandb, "init", flaky)
    sink = WandbSink("observatory", "r4", dir=wandb_env)
    for step in range(5):
        sink.log({"x": float(step)}, step)
    sink.finish()
    assert len(calls) == 2
    assert sink.stats()["errors"] == 0 and sink.stats()["logged"] == 5
    (run_dir,) = glob.glob(str(wandb_env / "wandb" / "offline-run-*"))
    # (the sink finished is not W&B's service having written the log out: its exit record comes last)
    wait_for(lambda: read_run(run_dir)["exit_code"] is not None, 60, "W&B to finish writing the offline run")
    assert [r["x"] for r in read_run(run_dir)["history"]] == [0.0, 1.0, 2.0, 3.0, 4.0]
