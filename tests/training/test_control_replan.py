"""The operator commands that change the course of a run, against a real Redis and the real trainer (tiny config,
on a thread): a new token budget, rollback, faults, stop and restart, the CLI, undo on resume."""

from __future__ import annotations

import json
import math
import time
import uuid

import pytest

from observatory import contract


def test_a_token_budget_change_replans_with_a_continuous_lr(tiny, start_trainer, op, redis_url, run_id):
    # 4 x 32 = 128 tokens per step, no warmup: a pure linear decay over 7813 steps. Paused at some step p >= 12
    # (wherever the pause lands), the budget is cut to end 28 steps later, then the run goes on to that end.
    cfg = tiny.load(train={"warmup_ratio": 0.0}, checkpoint={"every_steps": 0})
    bg = start_trainer(cfg, run_id, redis_url)
    bg.wait_step(12)
    assert op.do("pause")["status"] == "applied"
    end = bg.trainer.state.step + 28
    ack = op.do("set-token-budget", {"tokens": end * 128})
    assert ack["status"] == "applied", ack
    assert op.do("resume")["status"] == "applied"
    assert bg.join() == 0  # it now ends at the new budget
    (ev,) = op.events("lr_replan")
    at = ev["step"]
    assert at == end - 28
    assert ev["payload"]["lr_before"] == pytest.approx(ev["payload"]["lr_after"], rel=1e-12)
    ms = {d["step"]: d["values"] for d in op.metrics()}
    assert max(ms) == end and ms[end][contract.M_TOTAL_STEPS] == end
    lr = [ms[s][contract.M_LR] for s in range(1, end + 1)]  # step s used schedule.lr(s - 1)
    old_slope, new_slope = lr[0] - lr[1], lr[at + 1] - lr[at + 2]
    assert new_slope > 2 * old_slope  # the decay now ends 28 steps on instead of at step 7813
    # no jump: across the re-plan the LR moves by at most one step of the new (steeper) slope
    assert abs(lr[at - 1] - lr[at]) <= new_slope * 1.001
    lr_at, lr_end = ev["payload"]["lr_after"], cfg.train.lr * cfg.train.min_lr_ratio
    assert lr[-1] == pytest.approx(lr_at + (lr_end - lr_at) * (end - 1 - at) / (end - at), rel=1e-5)


def test_rollback_restores_state_and_sampler_and_skips_batches(tiny, start_trainer, op, redis_url, run_id):
    # Every checkpoint kept, so step 7 is there however far the run got before the pause landed.
    bg = start_trainer(tiny.load(checkpoint={"keep_last": 1000}), run_id, redis_url)
    t = bg.trainer
    bg.wait_step(16)
    assert op.do("pause")["status"] == "applied"
    before = {d["step"]: d["values"] for d in op.metrics_through(t.state.step)}
    ack = op.do("rollback", {"step": 7})
    assert ack["status"] == "applied" and "rolled back to step 7" in ack["detail"], ack
    assert t.state.step == 7 and t.sampler.batch_index == 7 and t.sampler.tokens_seen == 7 * 128
    assert 14 not in t.checkpointer.store.steps()  # the abandoned branch's checkpoint is set aside
    n_before = len(op.metrics())
    assert op.do("resume")["status"] == "applied"
    after = op.metrics_after(n_before)
    assert after[0]["step"] == 8
    assert after[0]["values"][contract.M_LOSS] == before[8][contract.M_LOSS]  # same state and batch: same loss
    assert op.do("pause")["status"] == "applied"
    n_before = len(op.metrics_through(t.state.step))
    ack = op.do("rollback", {"step": 7, "skip_batches": 3})
    assert ack["status"] == "applied" and "skipping 3 batches" in ack["detail"]
    assert t.state.step == 7 and t.sampler.batch_index == 10 and t.sampler.tokens_seen == 7 * 128
    op.do("resume")
    after = op.metrics_after(n_before)
    assert after[0]["step"] == 8 and after[0]["values"][contract.M_LOSS] != before[8][contract.M_LOSS]
    assert after[0]["values"][contract.M_TOTAL_TOKENS] == 8 * 128  # skipped batches are not tokens seen
    bg.stop()
    rewinds = [m.data for m in op.stream() if m.kind == "rewind"]
    assert rewinds[0]["to_step"] == 7 and rewinds[0]["from_step"] >= 16
    assert rewinds[1]["to_step"] == 7 and rewinds[1]["from_step"] >= 8


def test_faults_make_real_signals_and_training_continues(tiny, start_trainer, op, redis_url, run_id):
    # No periodic checkpoint: a save at the stall's boundary would (rightly) keep the stall out of the step time.
    cfg = tiny.load(train={"warmup_ratio": 0.0}, checkpoint={"every_steps": 0})
    bg = start_trainer(cfg, run_id, redis_url)
    bg.wait_step(2)
    ack = op.do("inject-fault", {"fault": "nan", "steps": 2})
    assert ack["status"] == "applied", ack
    at = int(ack["step"])  # the step boundary it was applied at; the fault starts with the next step
    spike_at = int(op.do("inject-fault", {"fault": "lr-spike", "steps": 2, "factor": 10})["step"])
    bg.wait_step(spike_at + 4)
    stall_at = int(op.do("inject-fault", {"fault": "stall", "seconds": 1})["step"])
    bg.wait_step(stall_at + 2)
    bg.stop()
    ms = {d["step"]: d["values"] for d in op.metrics()}
    assert math.isnan(ms[at + 1][contract.M_LOSS]) and math.isnan(ms[at + 2][contract.M_LOSS])
    assert math.isfinite(ms[at + 3][contract.M_LOSS]) and ms[at + 1][contract.M_FAULT_ACTIVE] == 1.0
    base = ms[spike_at + 3][contract.M_LR]
    assert ms[spike_at + 1][contract.M_LR] == pytest.approx(10 * base, rel=0.01)
    # the loop slept a second at that boundary: the next step's time shows it
    assert ms[stall_at + 1][contract.M_STEP_TIME] >= 1.0
    assert [e["payload"]["fault"] for e in op.events("fault_injected")] == ["nan", "lr-spike", "stall"]


def test_stop_checkpoints_and_exits_0_and_a_restart_remembers_applied_ids(tiny, start_trainer, op, until,
                                                                           redis_url, redis_client, run_id):
    cfg = tiny.load()
    bg = start_trainer(cfg, run_id, redis_url)
    bg.wait_step(3)
    cid = op.send("stop", reason="maintenance")
    ack = op.wait_ack(cid)
    assert ack["status"] == "applied" and "written; exiting" in ack["detail"]
    assert bg.join() == 0
    stopped_at = bg.trainer.state.step
    assert bg.trainer.checkpointer.store.steps()[-1] == stopped_at
    assert [m.data["state"] for m in op.stream() if m.kind == "state"][-1] == "stopped"
    redis_client.delete(contract.seen_commands_key(run_id))  # only the checkpoint remembers it now
    bg = start_trainer(cfg, run_id, redis_url)
    bg.wait_step(stopped_at + 1)
    op.send("stop", cmd_id=cid)
    applied = until(lambda: (a := [a for a in op.acks(cid) if a["status"] == "applied"]) and len(a) >= 2 and a,
                    60, "the repeated stop's ack")
    assert "duplicate id" in applied[-1]["detail"]
    bg.wait_step(bg.trainer.state.step + 2)
    assert bg.thread.is_alive()


@pytest.mark.slow
def test_the_control_cli_waits_for_the_ack_and_sets_its_exit_status(tiny, start_trainer, trainer_cli, op, redis_url,
                                                                    redis_client, run_id):
    p = trainer_cli.control("no-such-run", "pause", "--reason", "x")
    assert p.returncode == 1 and "unknown run" in p.stdout
    redis_client.sadd(contract.RUNS_KEY, "sleeping-run")
    p = trainer_cli.control("sleeping-run", "pause", "--reason", "x", timeout="0.5")
    assert p.returncode == 3 and p.stdout.startswith("timeout")
    p = trainer_cli.control("sleeping-run", "rollback", "1", "2", "3", "--reason", "x")
    assert p.returncode == 1 and "too many positional arguments" in p.stderr
    bg = start_trainer(tiny.load(), run_id, redis_url)
    bg.wait_step(2)
    p = trainer_cli.control(run_id, "set-lr-multiplier", "0.5", "--reason", "calmer")
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.splitlines()[-1].startswith("applied: LR multiplier 1 -> 0.5")
    p = trainer_cli.control(run_id, "rollback", "12345", "--reason", "oops")
    assert p.returncode == 1 and "rejected: no checkpoint at step 12345" in p.stdout
    bg.stop()
    cmd = op.events("command")[0]
    assert cmd["payload"]["reason"] == "calmer" and cmd["payload"]["command"] == "set-lr-multiplier"


def test_commands_applied_after_the_last_checkpoint_are_undone_on_resume(tiny, start_trainer, op, until, redis_url,
                                                                         redis_client, run_id):
    cfg = tiny.load()
    bg = start_trainer(cfg, run_id, redis_url)
    bg.wait_step(2)
    kept = op.send("set-lr-multiplier", {"value": 0.5})
    assert op.wait_ack(kept)["status"] == "applied"
    bg.trainer.request_stop("test")  # the final checkpoint holds `kept`
    assert bg.join() == 0
    # As if the process had applied one more command and rejected another, then died before its next checkpoint:
    # only Redis knows them.
    seen = contract.seen_commands_key(run_id)
    now = time.time()
    redis_client.hset(seen, "lost-0001", json.dumps({"outcome": "applied", "t": now, "command": "set-lr-multiplier"}))
    redis_client.hset(seen, "refused-0001", json.dumps({"outcome": "rejected", "t": now, "command": "resume",
                                                     "detail": "not paused"}))
    start_trainer(cfg, run_id, redis_url)
    rolled = until(lambda: op.events("commands_rolled_back"), 120, "a commands_rolled_back event")
    assert rolled[0]["payload"]["ids"] == ["lost-0001"] and "with a new id" in rolled[0]["payload"]["detail"]
    outcomes = {k.decode(): json.loads(v)["outcome"] for k, v in redis_client.hgetall(seen).items()}
    assert outcomes == {kept: "applied", "lost-0001": "undone", "refused-0001": "rejected"}
    ack = op.do("set-lr-multiplier", {"value": 0.25}, cmd_id="lost-0001")
    assert ack["status"] == "rejected" and ack["detail"].startswith("id lost-0001 was undone by a restart"), ack
    ack = op.do("resume", cmd_id="refused-0001")
    assert ack["detail"] == "replayed: id refused-0001 was already rejected: not paused", ack
    assert op.do("set-lr-multiplier", {"value": 0.25})["status"] == "applied"


def test_a_command_waiting_in_the_stream_is_queued_before_the_first_step(redis_url, redis_client):
    """A command sent while the trainer was down: caught_up() returns once the reader has queued it, so the loop's
    first boundary applies it (before, a short run could finish before the reader thread had read it)."""
    from training.control import ControlChannel

    key = b"k" * 32
    run_id = f"catchup-{uuid.uuid4().hex[:8]}"
    fields = contract.command_fields(uuid.uuid4().hex, "pause", {}, "waiting since before the start", "tester")
    redis_client.xadd(contract.control_stream(run_id), contract.sign_command(run_id, fields, key))
    channel = ControlChannel(redis_url, run_id, key)
    try:
        channel.start({}, None)
        assert channel.caught_up(30.0)
        assert [c.name for c in channel.poll()] == ["pause"]
    finally:
        channel.close()
