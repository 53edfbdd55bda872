"""The operator command channel against a real Redis and the real trainer (tiny config, on a thread): pause,
repeats and replays, checkpoints, bad commands (the replanning, rollback, fault, stop and resume commands:
test_control_replan.py)."""

from __future__ import annotations

import json
import os
import time
import uuid

from observatory import contract



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
