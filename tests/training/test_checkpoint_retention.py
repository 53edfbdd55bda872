"""Checkpoint retention, the published checkpoint list, and a rollback an operator can use: nearest earlier
checkpoint, a checkpoint before every destructive command, and the commands a rollback undid forgotten."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import jax.numpy as jnp
import pytest

from observatory import contract
from training.checkpoint import Checkpoints
from training.retention import Entry, Retention, kind_of

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------------------------------------- the policy
def _plan(policy: Retention, entries):
    keep, drop = policy.plan([e if isinstance(e, Entry) else Entry(e) for e in entries])
    return sorted(keep), keep, drop


def test_kinds_come_from_why_the_checkpoint_was_taken():
    assert [kind_of(w) for w in ("periodic", "command abc", "before rollback x", "stop", "final")] == [
        "periodic", "manual", "pre-command", "final", "final"]


def test_it_keeps_the_newest_every_kth_forever_and_a_denser_recent_window():
    steps = list(range(0, 1001, 50))
    kept, why, drop = _plan(Retention(keep_last=2, keep_every=500, recent_every=100, recent_steps=300), steps)
    assert kept == [0, 500, 700, 800, 900, 950, 1000]
    assert why[950] == "newest 2" and why[500] == "every 500 steps" and "last 300" in why[700]
    assert drop[650] == "not kept by the retention policy"


def test_manual_and_pre_command_checkpoints_are_kept_unless_switched_off():
    entries = [Entry(10), Entry(13, "command c1"), Entry(17, "before rollback r1"), Entry(20), Entry(30)]
    assert _plan(Retention(keep_last=1), entries)[0] == [13, 17, 30]
    assert _plan(Retention(keep_last=1, keep_manual=False), entries)[0] == [30]


def test_a_disk_budget_drops_the_oldest_unprotected_first_and_never_the_newest():
    entries = [Entry(0, bytes=10), Entry(5, "command a", bytes=10), Entry(10, bytes=10), Entry(15, bytes=10),
               Entry(20, bytes=10)]
    policy = Retention(keep_last=5, max_bytes=30)
    kept, _, drop = _plan(policy, entries)
    assert kept == [5, 15, 20] and "disk budget" in drop[0] and "disk budget" in drop[10]
    kept, _, _ = _plan(Retention(keep_last=5, max_bytes=1), entries)
    assert kept == [20]  # over budget even alone: the newest stays


# ---------------------------------------------------------------------------------------------- on disk
def _tree(x: float):
    return {"w": jnp.full((4, 4), x, jnp.float32)}


def test_the_store_prunes_by_policy_and_lists_what_it_keeps_and_why(tmp_path):
    ck = Checkpoints(tmp_path / "run", policy=Retention(keep_last=2, recent_every=20, recent_steps=40))
    pruned = {}
    for step, why in ((10, "periodic"), (20, "periodic"), (25, "command c1"), (30, "periodic"), (40, "periodic"),
                      (50, "periodic"), (60, "periodic")):
        ck.save(step, _tree(step), {"why": why})
        pruned[step] = ck.wait().get("pruned", [])
    assert ck.steps() == [20, 25, 40, 50, 60]
    # each write's prune: a step goes once it leaves the newest 2 and is no multiple of 20
    assert pruned == {10: [], 20: [], 25: [10], 30: [], 40: [], 50: [30], 60: []}
    entries = {e["step"]: e for e in ck.entries()}
    assert entries[25]["kind"] == "manual" and entries[25]["kept"] == "manual checkpoint"
    assert entries[60]["kept"] == "newest 2" and entries[60]["bytes"] > 0 and entries[60]["saved_at"] > 0
    ck.close()
    # a new process reads why each checkpoint was taken back from its meta file
    again = Checkpoints(tmp_path / "run", policy=Retention(keep_last=1))
    assert [e["kind"] for e in again.entries()] == ["periodic", "manual", "periodic", "periodic", "periodic"]
    again.close()


# ---------------------------------------------------------------------------------------------- in the trainer
class Sender:
    def __init__(self, client, run_id, until):
        self.client, self.run_id, self.until = client, run_id, until

    def send(self, command, args=None, cmd_id=None) -> str:
        cmd_id = cmd_id or uuid.uuid4().hex
        fields = contract.command_fields(cmd_id, command, args, "retention test", "tester")
        self.client.xadd(contract.control_stream(self.run_id),
                         contract.sign_command(self.run_id, fields, contract.load_run_control_key(self.run_id)))
        return cmd_id

    def final_acks(self, cmd_id) -> list[dict]:
        acks = ({k.decode(): v.decode() for k, v in f.items()} for _, f in
                self.client.xrange(contract.ack_stream(self.run_id)))
        return [a for a in acks if a["id"] == cmd_id and a["status"] in ("applied", "rejected")]

    def do(self, command, args=None, cmd_id=None, n=1) -> dict:
        cmd_id = self.send(command, args, cmd_id)
        return self.until(lambda: len(acks := self.final_acks(cmd_id)) >= n and acks, 120, f"{command} ack")[-1]

    def listing(self) -> list[dict]:
        raw = self.client.get(contract.checkpoints_key(self.run_id))
        return json.loads(raw)["checkpoints"] if raw else []


@pytest.mark.slow
def test_rollback_between_checkpoints_undoes_later_commands_and_lists_checkpoints(
        tiny, start_trainer, until, stream, redis_url, redis_client, run_id, tmp_path):
    op = Sender(redis_client, run_id, until)
    cfg = tiny.load(checkpoint={"every_steps": 5, "keep_last": 1, "recent_every": 10, "recent_steps": 1000})
    bg = start_trainer(cfg, run_id, redis_url)
    t = bg.trainer
    bg.wait_step(12)
    assert op.do("pause")["status"] == "applied"
    lr_id = op.do("set-lr-multiplier", {"value": 0.5})["id"]
    manual = op.do("checkpoint")
    at = t.state.step
    assert manual["status"] == "applied" and at >= 12
    listed = until(lambda: (ls := op.listing()) and ls[-1]["step"] == at and ls, 30,
                   "the manual checkpoint in the published list")
    by_step = {c["step"]: c for c in listed}
    assert by_step[at]["kind"] == "manual" and by_step[10]["kept"].startswith("every 10")

    p = subprocess.run([sys.executable, "-m", "training", "list-checkpoints", run_id], cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and f"{at:8d}  manual" in p.stdout, p.stdout + p.stderr

    assert op.do("resume")["status"] == "applied"
    bg.wait_step(at + 3)
    assert op.do("pause")["status"] == "applied"
    at2 = t.state.step
    rb = op.send("rollback", {"step": 11})  # between the checkpoints at 10 and 15: the nearest earlier is 10
    ack = until(lambda: op.final_acks(rb), 120, "the rollback's ack")[-1]
    assert ack["status"] == "applied", ack
    assert "rolled back to step 10 (the nearest checkpoint at or before step 11)" in ack["detail"]
    assert t.state.step == 10 and t.schedule.multiplier == 1.0
    # the state the rollback discarded was checkpointed first, and set aside with the abandoned branch
    pre = list((tmp_path / "ckpt" / run_id).glob(f"abandoned-*/{at2}/meta/metadata"))
    assert pre and json.loads(pre[0].read_text())["why"] == f"before rollback {rb}"
    # (the event goes through the trainer's publisher, which flushes on its own thread: it can land after the ack)
    undone = until(lambda: [m.data["payload"] for m in stream(redis_client, run_id)
                            if m.kind == "event" and m.data["name"] == "commands_rolled_back"], 30,
                   "the commands_rolled_back event")
    assert undone[-1]["by"] == rb
    assert set(undone[-1]["ids"]) == {lr_id, manual["id"]}  # pause and resume act on the loop: not undone
    assert lr_id not in t.state.applied_ids
    assert json.loads(redis_client.hget(contract.seen_commands_key(run_id), lr_id))["outcome"] == "undone"
    assert until(lambda: op.listing()[-1]["step"] == 10, 30, "the list after the rollback")
    # its id is spent: sent again it is refused, and a new id applies it
    again = op.do("set-lr-multiplier", {"value": 0.5}, cmd_id=lr_id, n=2)
    assert again["status"] == "rejected" and f"undone by rollback {rb}" in again["detail"]
    assert t.schedule.multiplier == 1.0
    assert op.do("set-lr-multiplier", {"value": 0.5})["status"] == "applied" and t.schedule.multiplier == 0.5
    ack = op.do("rollback", {"step": 10_000})
    assert ack["status"] == "rejected" and "no checkpoint at step 10000" in ack["detail"]
