"""Orbax checkpoints: round trip, retention, refusal of corrupt or incompatible ones, and exact resume after kill -9."""

from __future__ import annotations

import random
import signal
import subprocess

import jax.numpy as jnp
import numpy as np
import pytest

from observatory import contract
from training.checkpoint import Checkpoints, abstract
from training.errors import CheckpointError


def _tree(x: float):
    return {"params": {"w": jnp.full((3, 2), x, jnp.float32)},
            "sampler": {"batch_index": np.asarray(np.int64(5_000_000_000)), "w": np.arange(4, dtype=np.float64)}}


def test_it_round_trips_arrays_and_numpy_state_with_meta(tmp_path):
    ck = Checkpoints(tmp_path / "run", keep_last=2)
    blocked = ck.save(10, _tree(1.5), {"fingerprint": {"model": {"d": 1}}, "applied_ids": ["a"]})
    assert blocked >= 0
    assert ck.unreported and ck.wait()["step"] == 10 and not ck.unreported
    assert ck.wait() is None  # each finished write is reported once
    state, meta = ck.restore(10, abstract(_tree(0.0)), {"model": {"d": 1}})
    assert float(state["params"]["w"][0, 0]) == 1.5
    assert int(state["sampler"]["batch_index"]) == 5_000_000_000  # int64 survives
    assert meta["step"] == 10 and meta["applied_ids"] == ["a"]
    ck.close()


def test_it_keeps_the_last_k_plus_every_nth(tmp_path):
    ck = Checkpoints(tmp_path / "run", keep_last=2, keep_every=10)
    for step in (5, 10, 15, 20, 25, 30, 35):
        ck.save(step, _tree(step), {"fingerprint": {}})
    ck.wait()
    assert ck.steps() == [10, 20, 30, 35]
    ck.close()


def test_it_refuses_a_checkpoint_of_an_incompatible_config_and_names_the_keys(tmp_path):
    ck = Checkpoints(tmp_path / "run")
    ck.save(3, _tree(1.0), {"fingerprint": {"model": {"d_model": 32, "n_layers": 2}}})
    ck.wait()
    with pytest.raises(CheckpointError, match=r"model\.d_model: checkpoint has 32, config has 64"):
        ck.restore(3, abstract(_tree(0.0)), {"model": {"d_model": 64, "n_layers": 2}})
    ck.close()


def test_it_refuses_a_corrupt_checkpoint(tmp_path):
    ck = Checkpoints(tmp_path / "run")
    ck.save(4, _tree(1.0), {"fingerprint": {}})
    ck.close()
    for p in (tmp_path / "run" / "4" / "state").rglob("*"):
        if p.is_file() and p.stat().st_size > 0 and "zarray" not in p.name and p.suffix != ".json":
            p.write_bytes(b"\0garbage")
    (tmp_path / "run" / "4" / "meta" / "metadata").write_text("{not json")
    ck = Checkpoints(tmp_path / "run")
    with pytest.raises(CheckpointError, match="unreadable"):
        ck.restore(4, abstract(_tree(0.0)), {})
    ck.close()


def test_set_aside_moves_newer_checkpoints_away(tmp_path):
    ck = Checkpoints(tmp_path / "run", keep_last=5)
    for step in (1, 2, 3):
        ck.save(step, _tree(step), {"fingerprint": {}})
    assert ck.set_aside_after(1) == [2, 3]
    assert ck.steps() == [1]
    assert list((tmp_path / "run").glob("abandoned-*/3"))
    ck.save(2, _tree(9.0), {"fingerprint": {}})  # the new branch can reuse the step numbers
    ck.wait()
    assert ck.steps() == [1, 2]
    ck.close()


# ---------------------------------------------------------------------------------------------- the trainer
def _metrics(records: list[dict]) -> list[dict]:
    return [r for r in records if r["kind"] == "metrics"]


def _close(a: float, b: float) -> bool:
    return a == b or abs(a - b) <= 1e-6 * max(abs(a), abs(b))


@pytest.mark.slow
def test_kill_9_at_any_moment_then_resume_is_exact(tmp_path, tiny, trainer_cli, jsonl, stream, until, redis_url,
                                                   redis_client, run_id):
    cfg = tiny()
    steps = 40
    ref = tmp_path / "ref.jsonl"
    p = trainer_cli.run(cfg, "--steps", str(steps), "--run-id", f"{run_id}-ref", "--metrics-jsonl", str(ref),
                        "--no-redis")
    assert p.returncode == 0, p.stderr[-2000:]
    want = {r["step"]: r["values"] for r in _metrics(jsonl(ref))}
    assert sorted(want) == list(range(1, steps + 1))

    out = tmp_path / "killed.jsonl"
    rng = random.Random(1)
    kills = []
    # Two crashes, the second resuming from a checkpoint written after the first resume. The killed processes
    # have no step limit, so a kill can never land after the run ended; each waits for a real condition (its
    # step in the JSONL, and a checkpoint on disk to resume from), then kills at once: mid-step, mid-publish or
    # mid-write of the next checkpoint, wherever the process happens to be.
    for kill_after, checkpoint in ((rng.randint(8, 13), 7), (rng.randint(22, 27), 21)):
        proc = trainer_cli.popen(cfg, "--run-id", run_id, "--metrics-jsonl", str(out), stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE)

        def ready():
            records = jsonl(out)
            written = {r["payload"]["step"] for r in records if r["kind"] == "event"
                       and r["name"] == "checkpoint_written"}
            # ... and, after a resume, its rewind in Redis: the publisher writes asynchronously, and a kill before
            # it did would lose the rewind with the process (under load its queue trailed the JSONL by seconds)
            rewinds = sum(m.kind == "rewind" for m in stream(redis_client, run_id))
            return proc.poll() is not None or (checkpoint in written and
                                               any(r["step"] >= kill_after for r in _metrics(records)) and
                                               rewinds >= len(kills))

        until(ready, 180, f"step {kill_after} and checkpoint {checkpoint}")
        assert proc.poll() is None, proc.stderr.read()[-2000:]
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        kills.append(max(r["step"] for r in _metrics(jsonl(out))))
    assert all(k < steps for k in kills), kills
    p = trainer_cli.run(cfg, "--steps", str(steps), "--run-id", run_id, "--metrics-jsonl", str(out))
    assert p.returncode == 0, p.stderr[-2000:]

    records = jsonl(out)
    got = _metrics(records)
    assert max(r["step"] for r in got) == steps
    for r in got:  # every loss ever published, before and after each crash, equals the uninterrupted run's
        for name in (contract.M_LOSS, contract.M_GRAD_NORM, contract.router_metric(0, "router_bias") + "/1"):
            assert _close(r["values"][name], want[r["step"]][name]), (r["step"], name)
        assert r["values"][contract.M_TOTAL_TOKENS] == want[r["step"]][contract.M_TOTAL_TOKENS]
        assert r["values"][contract.tokens_seen("licenses")] == want[r["step"]][contract.tokens_seen("licenses")]
    resumed = [r["payload"]["from_checkpoint"] for r in records if r["kind"] == "event" and r["name"] == "resumed"]
    assert len(resumed) == 2 and all(s % 7 == 0 for s in resumed)
    assert resumed[0] >= 7 and resumed[1] >= 21  # at least the checkpoint each kill waited for
    # the web is told which published points each resume supersedes
    rewinds = [m.data for m in stream(redis_client, run_id) if m.kind == "rewind"]
    assert len(rewinds) == 2
    for rw, res, killed_at in zip(rewinds, resumed, kills):
        assert rw["to_step"] == res <= rw["from_step"] <= killed_at


@pytest.mark.slow
def test_an_incompatible_config_is_refused_naming_the_key_and_nothing_is_overwritten(tmp_path, tiny, trainer_cli):
    p = trainer_cli.run(tiny(), "--steps", "3", "--run-id", "compat", "--no-redis")
    assert p.returncode == 0, p.stderr[-2000:]
    ck_dir = tmp_path / "ckpt" / "compat"
    before = {str(f.relative_to(ck_dir)): f.stat().st_mtime_ns for f in ck_dir.rglob("*") if f.is_file()}
    p = trainer_cli.run(tiny(model={"d_model": 64}), "--steps", "6", "--run-id", "compat", "--no-redis")
    assert p.returncode == 1
    assert "model.d_model: checkpoint has 32, config has 64" in p.stdout + p.stderr
    after = {str(f.relative_to(ck_dir)): f.stat().st_mtime_ns for f in ck_dir.rglob("*") if f.is_file()}
    assert after == before
    # --fresh starts over and keeps the old checkpoints aside
    p = trainer_cli.run(tiny(), "--steps", "2", "--run-id", "compat", "--no-redis", "--fresh")
    assert p.returncode == 0, p.stderr[-2000:]
    assert list((tmp_path / "ckpt").glob("compat.replaced-*/3"))
