"""The operator command channel against a real Redis and the real trainer (tiny config, on a thread)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
import uuid

import pytest

from observatory import contract
from test_trainer import ROOT, BackgroundTrainer, load_tiny, stream
from training import control as control_lib
from training.cli import command_args


def send(client, run_id: str, command: str, args=None, cmd_id: str | None = None, reason: str = "test") -> str:
    cmd_id = cmd_id or uuid.uuid4().hex
    client.xadd(contract.control_stream(run_id), contract.command_fields(cmd_id, command, args, reason, "tester"))
    return cmd_id


def acks(client, run_id: str, cmd_id: str) -> list[dict]:
    out = []
    for _, f in client.xrange(contract.ack_stream(run_id)):
        f = {k.decode(): v.decode() for k, v in f.items()}
        if f["id"] == cmd_id:
            out.append(f)
    return out


def wait_ack(client, run_id: str, cmd_id: str, timeout: float = 30, final=("applied", "rejected")) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = [a for a in acks(client, run_id, cmd_id) if a["status"] in final]
        if done:
            return done[-1]
        time.sleep(0.02)
    raise AssertionError(f"no {final} ack for {cmd_id}: {acks(client, run_id, cmd_id)}")


def metrics(client, run_id: str) -> list[dict]:
    return [m.data for m in stream(client, run_id) if m.kind == "metrics"]


def metrics_after(client, run_id: str, n_before: int, count: int = 1, timeout: float = 30) -> list[dict]:
    """The metrics records published after the first n_before, once at least `count` of them arrived."""
    deadline = time.monotonic() + timeout
    while len(out := metrics(client, run_id)[n_before:]) < count:
        assert time.monotonic() < deadline, f"only {len(out)} new metrics records"
        time.sleep(0.02)
    return out


# ---------------------------------------------------------------------------------------------- validation
@pytest.mark.parametrize("name,args,reason", [
    ("launch-missiles", {}, "unknown command"),
    ("pause", {"now": True}, "unexpected argument"),
    ("rollback", {}, "missing argument 'step'"),
    ("rollback", {"step": -1}, "step must be an integer >= 0"),
    ("set-lr-multiplier", {"value": "high"}, "value must be a number"),
    ("set-lr-multiplier", {"value": 1e9}, "value must be a number in [0, 1000]"),
    ("set-token-budget", {"tokens": 0}, "tokens must be an integer >= 1"),
    ("set-mixture", {"weights": {"a": -1}}, "must be a number >= 0"),
    ("set-mixture", {"weights": {}}, "non-empty"),
    ("inject-fault", {"fault": "meteor"}, "fault must be one of"),
    ("inject-fault", {"fault": "nan", "steps": 10**6}, "steps must be an integer >= 1 and <= 1000"),
])
def test_validation_rejects_with_a_reason(name, args, reason):
    with pytest.raises(control_lib.CommandError, match=reason.replace("[", r"\[").replace("]", r"\]")):
        control_lib.validate_args(name, args)


def test_cli_words_become_command_args():
    assert command_args("rollback", ["120", "5"]) == {"step": 120, "skip_batches": 5}
    assert command_args("rollback", ["step=3"]) == {"step": 3}
    assert command_args("set-token-budget", ["2e6"]) == {"tokens": 2_000_000}
    assert command_args("set-mixture", ["a=1", "b=0.5"]) == {"weights": {"a": 1, "b": 0.5}}
    assert command_args("inject-fault", ["lr-spike", "3", "factor=20"]) == {"fault": "lr-spike", "steps": 3,
                                                                           "factor": 20}


# ---------------------------------------------------------------------------------------------- the trainer
def test_pause_holds_the_step_while_the_heartbeat_keeps_beating(tmp_path, redis_url, redis_client, run_id):
    with BackgroundTrainer(load_tiny(tmp_path), run_id, redis_url) as bg:
        bg.wait_step(3)
        cid = send(redis_client, run_id, "pause")
        ack = wait_ack(redis_client, run_id, cid)
        assert ack["status"] == "applied" and "paused at step" in ack["detail"]
        assert [a["status"] for a in acks(redis_client, run_id, cid)] == ["accepted", "applied"]
        held = bg.trainer.step
        n_hb = len([m for m in stream(redis_client, run_id) if m.kind == "heartbeat"])
        time.sleep(1.2)
        assert bg.trainer.step == held
        hbs = [m.data for m in stream(redis_client, run_id) if m.kind == "heartbeat"][n_hb:]
        assert len(hbs) >= 2 and all(h["phase"] == "paused" and h["step"] == held for h in hbs)
        assert json.loads(redis_client.get(contract.heartbeat_key(run_id)))["phase"] == "paused"
        assert wait_ack(redis_client, run_id, send(redis_client, run_id, "pause"))["detail"] == "already paused"
        assert wait_ack(redis_client, run_id, send(redis_client, run_id, "resume"))["status"] == "applied"
        bg.wait_step(held + 3)
    states = [m.data["state"] for m in stream(redis_client, run_id) if m.kind == "state"]
    assert "paused" in states and states[states.index("paused") + 1] == "training"


def test_a_repeated_command_id_is_applied_once(tmp_path, redis_url, redis_client, run_id):
    with BackgroundTrainer(load_tiny(tmp_path), run_id, redis_url) as bg:
        bg.wait_step(2)
        cid = send(redis_client, run_id, "set-lr-multiplier", {"value": 0.5})
        assert wait_ack(redis_client, run_id, cid)["status"] == "applied"
        send(redis_client, run_id, "set-lr-multiplier", {"value": 0.25}, cmd_id=cid)
        deadline = time.monotonic() + 10
        while len([a for a in acks(redis_client, run_id, cid) if a["status"] == "applied"]) < 2:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        dup = acks(redis_client, run_id, cid)[-1]
        assert "duplicate id" in dup["detail"]
        assert bg.trainer.schedule.multiplier == 0.5
        assert redis_client.sismember(control_lib.applied_key(run_id), cid)
        step = bg.trainer.step
        bg.wait_step(step + 2)
    commands = [m.data for m in stream(redis_client, run_id) if m.kind == "event" and m.data["name"] == "command"]
    assert [c["payload"]["id"] for c in commands] == [cid]
    assert metrics(redis_client, run_id)[-1]["values"]["optim/lr_multiplier"] == 0.5


def test_bad_commands_are_rejected_with_a_reason_and_training_goes_on(tmp_path, redis_url, redis_client, run_id):
    cfg = load_tiny(tmp_path, train={"allow_faults": False})
    with BackgroundTrainer(cfg, run_id, redis_url) as bg:
        bg.wait_step(2)
        cases = {
            send(redis_client, run_id, "frobnicate"): "unknown command",
            send(redis_client, run_id, "set-lr-multiplier", {"value": "x"}): "must be a number",
            send(redis_client, run_id, "rollback", {"step": 999}): "no checkpoint at step 999",
            send(redis_client, run_id, "inject-fault", {"fault": "nan"}): "fault injection is disabled",
            send(redis_client, run_id, "set-mixture", {"weights": {"klingon": 1}}): "unknown domain",
            send(redis_client, run_id, "resume"): "not paused",
            send(redis_client, run_id, "set-token-budget", {"tokens": 10}): "must exceed tokens seen",
        }
        raw = "raw-" + uuid.uuid4().hex
        redis_client.xadd(contract.control_stream(run_id), {"v": "1", "id": raw, "command": "pause",
                                                            "args": "{not json"})
        cases[raw] = "args is not JSON"
        redis_client.xadd(contract.control_stream(run_id), {"v": "1", "command": "pause"})  # no id at all
        for cid, reason in cases.items():
            ack = wait_ack(redis_client, run_id, cid)
            assert ack["status"] == "rejected" and reason in ack["detail"], (reason, ack)
        wait_ack(redis_client, run_id, "")  # the id-less one is rejected too
        step = bg.trainer.step
        bg.wait_step(step + 3)
        assert bg.thread.is_alive() and not bg.trainer.paused
    pending = redis_client.xpending(contract.control_stream(run_id), contract.TRAINER_GROUP)
    assert pending["pending"] == 0  # everything was XACKed


def test_a_token_budget_change_replans_with_a_continuous_lr(tmp_path, redis_url, redis_client, run_id):
    # 4 x 32 = 128 tokens per step; budget 100 steps, cut to 40 at step ~12. No warmup: a pure linear decay.
    cfg = load_tiny(tmp_path, train={"token_budget": 12_800, "warmup_ratio": 0.0},
                    checkpoint={"every_steps": 0})
    with BackgroundTrainer(cfg, run_id, redis_url) as bg:
        bg.wait_step(12)
        cid = send(redis_client, run_id, "set-token-budget", {"tokens": 40 * 128})
        ack = wait_ack(redis_client, run_id, cid)
        assert ack["status"] == "applied", ack
        assert bg.join(60) == 0  # it now ends at the new budget
    msgs = stream(redis_client, run_id)
    ev = next(m.data for m in msgs if m.kind == "event" and m.data["name"] == "lr_replan")
    at = ev["step"]
    assert ev["payload"]["lr_before"] == pytest.approx(ev["payload"]["lr_after"], rel=1e-12)
    ms = {d["step"]: d["values"] for d in metrics(redis_client, run_id)}
    assert max(ms) == 40 and ms[40]["optim/total_steps"] == 40
    lr = [ms[s]["optim/learning_rate"] for s in range(1, 41)]  # step s used schedule.lr(s - 1)
    old_slope, new_slope = lr[0] - lr[1], lr[at + 1] - lr[at + 2]
    assert new_slope > 2 * old_slope  # the decay now ends at step 40 instead of 100
    # no jump: across the re-plan the LR moves by at most one step of the new (steeper) slope
    assert abs(lr[at - 1] - lr[at]) <= new_slope * 1.001
    lr_at, lr_end = ev["payload"]["lr_after"], cfg.train.lr * cfg.train.min_lr_ratio
    assert lr[-1] == pytest.approx(lr_at + (lr_end - lr_at) * (39 - at) / (40 - at), rel=1e-5)


def test_rollback_restores_state_and_sampler_and_skips_batches(tmp_path, redis_url, redis_client, run_id):
    with BackgroundTrainer(load_tiny(tmp_path), run_id, redis_url) as bg:
        bg.wait_step(16)
        assert wait_ack(redis_client, run_id, send(redis_client, run_id, "pause"))["status"] == "applied"
        before = {d["step"]: d["values"] for d in metrics(redis_client, run_id)}
        ack = wait_ack(redis_client, run_id, send(redis_client, run_id, "rollback", {"step": 7}))
        assert ack["status"] == "applied" and "rolled back to step 7" in ack["detail"], ack
        t = bg.trainer
        assert t.step == 7 and t.sampler.batch_index == 7 and t.sampler.tokens_seen == 7 * 128
        assert 14 not in t.ckpt.steps()  # the abandoned branch's checkpoint is set aside
        n_before = len(metrics(redis_client, run_id))
        assert wait_ack(redis_client, run_id, send(redis_client, run_id, "resume"))["status"] == "applied"
        after = metrics_after(redis_client, run_id, n_before)
        assert after[0]["step"] == 8
        assert after[0]["values"]["train/loss"] == before[8]["train/loss"]  # same state, same batch: same loss
        assert wait_ack(redis_client, run_id, send(redis_client, run_id, "pause"))["status"] == "applied"
        ack = wait_ack(redis_client, run_id, send(redis_client, run_id, "rollback", {"step": 7, "skip_batches": 3}))
        assert ack["status"] == "applied" and "skipping 3 batches" in ack["detail"]
        assert t.step == 7 and t.sampler.batch_index == 10 and t.sampler.tokens_seen == 7 * 128
        n_before = len(metrics(redis_client, run_id))
        wait_ack(redis_client, run_id, send(redis_client, run_id, "resume"))
        after = metrics_after(redis_client, run_id, n_before)
        assert after[0]["step"] == 8 and after[0]["values"]["train/loss"] != before[8]["train/loss"]
        assert after[0]["values"]["throughput/total_tokens"] == 8 * 128  # skipped batches are not tokens seen
    rewinds = [m.data for m in stream(redis_client, run_id) if m.kind == "rewind"]
    assert rewinds[0]["to_step"] == 7 and rewinds[0]["from_step"] >= 16
    assert rewinds[1]["to_step"] == 7 and rewinds[1]["from_step"] >= 8


def test_faults_make_real_signals_and_training_continues(tmp_path, redis_url, redis_client, run_id):
    with BackgroundTrainer(load_tiny(tmp_path, train={"warmup_ratio": 0.0}), run_id, redis_url) as bg:
        bg.wait_step(2)
        ack = wait_ack(redis_client, run_id, send(redis_client, run_id, "inject-fault", {"fault": "nan", "steps": 2}))
        assert ack["status"] == "applied", ack
        at = int(ack["step"])  # the step boundary it was applied at; the fault starts with the next step
        ack = wait_ack(redis_client, run_id, send(redis_client, run_id, "inject-fault",
                                                  {"fault": "lr-spike", "steps": 2, "factor": 10}))
        spike_at = int(ack["step"])
        bg.wait_step(spike_at + 4)
        t0 = time.monotonic()
        wait_ack(redis_client, run_id, send(redis_client, run_id, "inject-fault", {"fault": "stall", "seconds": 1}))
        s = bg.trainer.step
        time.sleep(0.5)
        assert bg.trainer.step <= s + 1  # stalled (at most the step in flight lands)
        bg.wait_step(s + 2)
        assert time.monotonic() - t0 >= 0.9
    ms = {d["step"]: d["values"] for d in metrics(redis_client, run_id)}
    assert math.isnan(ms[at + 1]["train/loss"]) and math.isnan(ms[at + 2]["train/loss"])
    assert math.isfinite(ms[at + 3]["train/loss"]) and ms[at + 1]["fault/active"] == 1.0
    base = ms[spike_at + 3]["optim/learning_rate"]
    assert ms[spike_at + 1]["optim/learning_rate"] == pytest.approx(10 * base, rel=0.01)
    assert "fault_injected" in {m.data["name"] for m in stream(redis_client, run_id) if m.kind == "event"}


def test_stop_checkpoints_and_exits_0_and_a_restart_remembers_applied_ids(tmp_path, redis_url, redis_client,
                                                                           run_id):
    cfg = load_tiny(tmp_path)
    with BackgroundTrainer(cfg, run_id, redis_url) as bg:
        bg.wait_step(3)
        cid = send(redis_client, run_id, "stop", reason="maintenance")
        ack = wait_ack(redis_client, run_id, cid)
        assert ack["status"] == "applied" and "written; exiting" in ack["detail"]
        assert bg.join(30) == 0
        stopped_at = bg.trainer.step
        assert bg.trainer.ckpt.steps()[-1] == stopped_at
    assert [m.data["state"] for m in stream(redis_client, run_id) if m.kind == "state"][-1] == "stopped"
    redis_client.delete(control_lib.applied_key(run_id))  # only the checkpoint remembers it now
    with BackgroundTrainer(cfg, run_id, redis_url) as bg:
        bg.wait_step(stopped_at + 1)
        send(redis_client, run_id, "stop", cmd_id=cid)
        deadline = time.monotonic() + 20
        while len(applied := [a for a in acks(redis_client, run_id, cid) if a["status"] == "applied"]) < 2:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert "duplicate id" in applied[-1]["detail"]
        bg.wait_step(bg.trainer.step + 2)
        assert bg.thread.is_alive()


@pytest.mark.slow
def test_the_control_cli_waits_for_the_ack_and_sets_its_exit_status(tmp_path, redis_url, redis_client, run_id):
    def cli(*args, timeout="20"):
        return subprocess.run([sys.executable, "-m", "training", "control", *args, "--timeout", timeout],
                              cwd=ROOT, capture_output=True, text=True, timeout=60)

    p = cli("no-such-run", "pause", "--reason", "x")
    assert p.returncode == 1 and "unknown run" in p.stdout
    redis_client.sadd(contract.RUNS_KEY, "sleeping-run")
    p = cli("sleeping-run", "pause", "--reason", "x", timeout="0.5")
    assert p.returncode == 3 and p.stdout.startswith("timeout")
    with BackgroundTrainer(load_tiny(tmp_path), run_id, redis_url) as bg:
        bg.wait_step(2)
        p = cli(run_id, "set-lr-multiplier", "0.5", "--reason", "calmer")
        assert p.returncode == 0, p.stdout + p.stderr
        assert p.stdout.splitlines()[-1].startswith("applied: LR multiplier 1 -> 0.5")
        p = cli(run_id, "rollback", "12345", "--reason", "oops")
        assert p.returncode == 1 and "rejected: no checkpoint at step 12345" in p.stdout
    cmd = next(m.data for m in stream(redis_client, run_id) if m.kind == "event" and m.data["name"] == "command")
    assert cmd["payload"]["reason"] == "calmer" and cmd["payload"]["command"] == "set-lr-multiplier"


def test_commands_applied_after_the_last_checkpoint_are_forgotten_on_resume(tmp_path, redis_url, redis_client,
                                                                           run_id):
    cfg = load_tiny(tmp_path)
    with BackgroundTrainer(cfg, run_id, redis_url) as bg:
        bg.wait_step(2)
        kept = send(redis_client, run_id, "set-lr-multiplier", {"value": 0.5})
        assert wait_ack(redis_client, run_id, kept)["status"] == "applied"
        bg.trainer.request_stop("test")  # the final checkpoint holds `kept`
        assert bg.join() == 0
    # As if the process had applied one more command and then died before its next checkpoint.
    redis_client.sadd(control_lib.applied_key(run_id), "lost-1")
    with BackgroundTrainer(cfg, run_id, redis_url) as bg:
        deadline = time.monotonic() + 30
        while not (rolled := [m.data for m in stream(redis_client, run_id)
                              if m.kind == "event" and m.data["name"] == "commands_rolled_back"]):
            assert time.monotonic() < deadline, "no commands_rolled_back event"
            time.sleep(0.05)
        assert rolled[0]["payload"]["ids"] == ["lost-1"]
        applied = {m.decode() for m in redis_client.smembers(control_lib.applied_key(run_id))}
        assert kept in applied and "lost-1" not in applied
        again = send(redis_client, run_id, "set-lr-multiplier", {"value": 0.25}, cmd_id="lost-1")
        ack = wait_ack(redis_client, run_id, again)
        assert ack["status"] == "applied" and "duplicate" not in ack["detail"]
