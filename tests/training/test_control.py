"""The operator command channel against a real Redis and the real trainer (tiny config, on a thread)."""

from __future__ import annotations

import json
import math
import os
import time
import uuid

import pytest

from observatory import contract


class Operator:
    """Sends commands to one run the way the web and the CLI do, and reads back acks and published records."""

    def __init__(self, client, run_id: str, read_stream, until):
        self.client, self.run_id, self.read_stream, self.until = client, run_id, read_stream, until

    def send(self, command: str, args=None, cmd_id: str | None = None, reason: str = "test") -> str:
        cmd_id = cmd_id or uuid.uuid4().hex
        fields = contract.command_fields(cmd_id, command, args, reason, "tester")
        self.client.xadd(contract.control_stream(self.run_id),
                         contract.sign_command(self.run_id, fields, contract.load_run_control_key(self.run_id)))
        return cmd_id

    def acks(self, cmd_id: str) -> list[dict]:
        entries = self.client.xrange(contract.ack_stream(self.run_id))
        return [a for a in ({k.decode(): v.decode() for k, v in f.items()} for _, f in entries) if a["id"] == cmd_id]

    def wait_ack(self, cmd_id: str, final=("applied", "rejected")) -> dict:
        """The last final ack of a command, once there is one."""
        return self.until(lambda: [a for a in self.acks(cmd_id) if a["status"] in final], 120,
                          f"a {final} ack for {cmd_id}")[-1]

    def do(self, command: str, args=None, **kw) -> dict:
        return self.wait_ack(self.send(command, args, **kw))

    def entry(self, cmd_id: str) -> dict:
        """The signed fields of a command as they went on the control stream (what an attacker can capture)."""
        stream = self.client.xrange(contract.control_stream(self.run_id))
        return next(f for _, f in stream if f[b"id"] == cmd_id.encode())

    def replay(self, fields: dict) -> dict:
        """Put captured fields on the control stream again, unchanged, and return the trainer's new final ack."""
        cmd_id = fields[b"id"].decode()
        n = len([a for a in self.acks(cmd_id) if a["status"] in ("applied", "rejected")])
        self.client.xadd(contract.control_stream(self.run_id), fields)
        return self.until(lambda: (a := [a for a in self.acks(cmd_id) if a["status"] in ("applied", "rejected")])
                          and len(a) > n and a, 120, f"the ack of the replayed {cmd_id}")[-1]

    def signed(self, command: str, args=None, issued_at: float | None = None) -> dict:
        """A correctly signed entry for a new id, issued at `issued_at` (the sender's clock)."""
        fields = {**contract.command_fields("t-" + uuid.uuid4().hex, command, args, "test", "tester"),
                  "t": repr(issued_at)}
        key = contract.load_run_control_key(self.run_id)
        return {k.encode(): v.encode() for k, v in contract.sign_command(self.run_id, fields, key).items()}

    def stream(self) -> list[contract.Message]:
        return self.read_stream(self.client, self.run_id)

    def metrics(self) -> list[dict]:
        return [m.data for m in self.stream() if m.kind == "metrics"]

    def events(self, name: str) -> list[dict]:
        return [m.data for m in self.stream() if m.kind == "event" and m.data["name"] == name]

    def metrics_after(self, n_before: int) -> list[dict]:
        """The metrics records after the first n_before, once there is at least one."""
        return self.until(lambda: self.metrics()[n_before:], 120, f"a metrics record after the first {n_before}")

    def metrics_through(self, step: int) -> list[dict]:
        """The metrics records once the one of `step` reached the stream (the publisher writes asynchronously)."""
        return self.until(lambda: (ms := self.metrics()) and ms[-1]["step"] >= step and ms, 120,
                          f"step {step} on the stream")


@pytest.fixture
def op(redis_client, run_id, stream, until) -> Operator:
    return Operator(redis_client, run_id, stream, until)


def test_pause_holds_the_step_while_the_heartbeat_keeps_beating(tiny, start_trainer, op, until, redis_url,
                                                                redis_client, run_id):
    bg = start_trainer(tiny.load(), run_id, redis_url)
    bg.wait_step(3)
    cid = op.send("pause")
    ack = op.wait_ack(cid)
    assert ack["status"] == "applied" and "paused at step" in ack["detail"]
    assert [a["status"] for a in op.acks(cid)] == ["accepted", "applied"]
    assert str(os.getpid()) not in op.acks(cid)[0]["detail"]  # acks are public (the run's log): no trainer pid
    held = bg.trainer.state.step
    n_hb = len([m for m in op.stream() if m.kind == "heartbeat"])
    hbs = until(lambda: (h := [m.data for m in op.stream() if m.kind == "heartbeat"][n_hb:]) and len(h) >= 2 and h,
                60, "two heartbeats while paused")
    assert bg.trainer.state.step == held
    assert all(h["phase"] == "paused" and h["step"] == held for h in hbs)
    assert json.loads(redis_client.get(contract.heartbeat_key(run_id)))["phase"] == "paused"
    assert op.do("pause")["detail"] == "already paused"
    assert op.do("resume")["status"] == "applied"
    bg.wait_step(held + 3)
    bg.stop()
    states = [m.data["state"] for m in op.stream() if m.kind == "state"]
    assert "paused" in states and states[states.index("paused") + 1] == "training"


def test_a_repeated_command_id_is_applied_once(tiny, start_trainer, op, until, redis_url, redis_client, run_id):
    bg = start_trainer(tiny.load(), run_id, redis_url)
    bg.wait_step(2)
    cid = op.send("set-lr-multiplier", {"value": 0.5})
    assert op.wait_ack(cid)["status"] == "applied"
    op.send("set-lr-multiplier", {"value": 0.25}, cmd_id=cid)
    until(lambda: len([a for a in op.acks(cid) if a["status"] == "applied"]) >= 2, 60, "the duplicate's ack")
    assert "duplicate id" in op.acks(cid)[-1]["detail"]
    assert bg.trainer.schedule.multiplier == 0.5
    assert json.loads(redis_client.hget(contract.seen_commands_key(run_id), cid))["outcome"] == "applied"
    bg.wait_step(bg.trainer.state.step + 2)
    bg.stop()
    assert [c["payload"]["id"] for c in op.events("command")] == [cid]
    assert op.metrics()[-1]["values"][contract.M_LR_MULT] == 0.5


def test_replayed_commands_are_refused_with_a_reason_and_a_restart_remembers_them(tiny, start_trainer, op, until,
                                                                                  redis_url, redis_client, run_id):
    # Whoever can write to Redis can capture a signed entry and add it again, unchanged: each kind is refused.
    cfg = tiny.load(checkpoint={"keep_last": 1000})
    started = time.time()
    bg = start_trainer(cfg, run_id, redis_url)
    t = bg.trainer
    bg.wait_step(2)
    rejected = op.send("resume")
    assert op.wait_ack(rejected)["detail"] == "not paused"
    assert op.do("pause")["status"] == "applied"
    assert op.do("checkpoint")["status"] == "applied"
    undone = op.send("set-lr-multiplier", {"value": 0.5})
    assert op.wait_ack(undone)["status"] == "applied"
    rb = op.send("rollback", {"step": t.state.step}, reason="undo the LR change")
    assert op.wait_ack(rb)["status"] == "applied" and t.schedule.multiplier == 1.0
    applied = op.send("set-lr-multiplier", {"value": 0.25})
    assert op.wait_ack(applied)["status"] == "applied"
    # its event goes out through the trainer's publisher thread and can land after the ack (failed once in CI at load)
    until(lambda: [e["payload"]["id"] for e in op.events("command")].count(applied) == 1, 60, "the command's event")
    captured = {cid: op.entry(cid) for cid in (rejected, undone, applied)}

    def refuses_every_replay():
        for fields, status, detail in [
                (captured[rejected], "rejected", f"replayed: id {rejected} was already rejected: not paused"),
                (captured[undone], "rejected", f"id {undone} was undone by rollback {rb}; send it again with a new id"),
                (captured[applied], "applied", "duplicate id: already applied, not applied again")]:
            ack = op.replay(fields)
            assert ack["status"] == status and ack["detail"] == detail, ack
        assert t.state.paused and t.schedule.multiplier == 0.25  # nothing changed
        assert [e["payload"]["id"] for e in op.events("command")].count(applied) == 1

    refuses_every_replay()
    # Freshness is measured against now, not against when the trainer started (which was before `started`).
    assert time.time() - started > 1
    old = op.signed("set-lr-multiplier", {"value": 4.0}, time.time() - contract.STALE_AFTER_S - 1)
    ack = op.replay(old)
    assert ack["status"] == "rejected" and ack["detail"].startswith("stale: issued "), ack
    assert f"(more than {contract.STALE_AFTER_S} s)" in ack["detail"], ack
    ahead = op.signed("resume", issued_at=time.time() + contract.MAX_CLOCK_SKEW_S + 60)
    ack = op.replay(ahead)
    assert ack["status"] == "rejected" and "in the future" in ack["detail"], ack
    assert t.state.paused and t.schedule.multiplier == 0.25
    assert op.replay(ahead)["detail"].startswith("replayed: ")  # refused once, refused for good

    # A restart from the checkpoint alone (Redis's copy deleted) remembers every id and what became of it.
    assert op.do("resume")["status"] == "applied"
    bg.wait_step(t.state.step + 2)  # the final checkpoint comes at a step of its own
    t.request_stop("test")
    assert bg.join() == 0
    redis_client.delete(contract.seen_commands_key(run_id))
    bg = start_trainer(cfg, run_id, redis_url)
    t = bg.trainer
    bg.wait_step(t.state.step + 1)
    assert op.do("pause")["status"] == "applied"
    refuses_every_replay()
    assert op.replay(ahead)["detail"].startswith("replayed: ")
    seen = {k.decode(): json.loads(v) for k, v in redis_client.hgetall(contract.seen_commands_key(run_id)).items()}
    assert seen[rejected]["outcome"] == "rejected" and seen[undone]["outcome"] == "undone"
    assert seen[applied]["outcome"] == "applied" and seen[undone]["by"] == rb
    # the undone command goes again under a new id
    assert op.do("set-lr-multiplier", {"value": 0.5})["status"] == "applied" and t.schedule.multiplier == 0.5


def test_a_command_applied_after_a_checkpoint_at_the_same_step_survives_a_stop(tiny, start_trainer, op, redis_url,
                                                                                run_id):
    # pause, checkpoint, then change the LR and stop without another step: the stop's checkpoint must carry the
    # change (it was skipped as "already saved at this step", and the restart trained at multiplier 1).
    cfg = tiny.load()
    bg = start_trainer(cfg, run_id, redis_url)
    t = bg.trainer
    bg.wait_step(2)
    assert op.do("pause")["status"] == "applied"
    assert op.do("checkpoint")["status"] == "applied"
    assert op.do("set-lr-multiplier", {"value": 0.5})["status"] == "applied"
    assert op.do("stop")["status"] == "applied"
    assert bg.join() == 0
    bg = start_trainer(cfg, run_id, redis_url)
    bg.wait_step(bg.trainer.state.step + 1)
    assert bg.trainer.schedule.multiplier == 0.5
    bg.trainer.request_stop("test")
    assert bg.join() == 0


def test_bad_commands_are_rejected_with_a_reason_and_training_goes_on(tiny, start_trainer, op, redis_url,
                                                                      redis_client, run_id):
    bg = start_trainer(tiny.load(train={"allow_faults": False}), run_id, redis_url)
    bg.wait_step(2)
    cases = {
        op.send("frobnicate"): "unknown command",
        op.send("set-lr-multiplier", {"value": "x"}): "must be a number",
        op.send("rollback", {"step": 999}): "no checkpoint at step 999",
        op.send("inject-fault", {"fault": "nan"}): "fault injection is disabled",
        op.send("set-mixture", {"weights": {"klingon": 1}}): "unknown domain",
        op.send("resume"): "not paused",
        op.send("set-token-budget", {"tokens": 10}): "must exceed tokens seen",
    }
    key, stream = contract.load_run_control_key(run_id), contract.control_stream(run_id)
    raw = "raw-" + uuid.uuid4().hex
    redis_client.xadd(stream, contract.sign_command(run_id, {"v": "1", "id": raw, "command": "pause",
                                                            "args": "{not json"}, key))
    cases[raw] = "args is not JSON"
    redis_client.xadd(stream, contract.sign_command(run_id, {"v": "1", "command": "pause"}, key))  # no id at all
    # Forgeries: whoever can write to Redis but lacks the run's control key cannot steer it.
    unsigned, forged, replayed = ("forged-" + uuid.uuid4().hex for _ in range(3))
    redis_client.xadd(stream, contract.command_fields(unsigned, "stop", reason="no key"))
    redis_client.xadd(stream, contract.sign_command(run_id, contract.command_fields(forged, "stop", reason="x"),
                                                    b"not-the-run-key-0123456789"))
    redis_client.xadd(stream, contract.sign_command("another-run", contract.command_fields(replayed, "stop"), key))
    cases.update({unsigned: "unsigned command", forged: "bad signature", replayed: "bad signature"})
    for cid, reason in cases.items():
        ack = op.wait_ack(cid)
        assert ack["status"] == "rejected" and reason in ack["detail"], (reason, ack)
    op.wait_ack("")  # the id-less one is rejected too
    bg.wait_step(bg.trainer.state.step + 3)
    assert bg.thread.is_alive() and not bg.trainer.state.paused
    bg.stop()
    pending = redis_client.xpending(contract.control_stream(run_id), contract.TRAINER_GROUP)
    assert pending["pending"] == 0  # everything was XACKed


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
