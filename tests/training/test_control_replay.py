"""Replay memory that survives loss (issue 45): the real trainer, real Redis and real orbax checkpoints. With the
seen-id hash deleted and the trainer restored from a checkpoint older than the command, a copy of the command inside
the acceptance window is refused by its nonce, remembered in a Redis key of its own with a TTL."""

from __future__ import annotations

import uuid
from pathlib import Path

from observatory import contract


def _acks(redis_client, run_id: str, cmd_id: str) -> list[dict]:
    entries = redis_client.xrange(contract.ack_stream(run_id))
    acks = ({k.decode(): v.decode() for k, v in f.items()} for _, f in entries)
    return [a for a in acks if a["id"] == cmd_id and a["status"] in ("applied", "rejected")]


def _final(redis_client, run_id, cmd_id, until, after: int = 0) -> dict:
    """The command's final ack number `after` + 1 (an earlier one may answer an earlier copy), once it is there."""
    return until(lambda: (a := _acks(redis_client, run_id, cmd_id)) and len(a) > after and a, 120,
                 f"final ack {after + 1} of {cmd_id}")[after]


def _send(redis_client, run_id, command, args=None) -> tuple[str, dict]:
    cmd_id = uuid.uuid4().hex
    fields = contract.sign_command(run_id, contract.command_fields(cmd_id, command, args, "test", "tester"),
                                   contract.load_run_control_key(run_id))
    redis_client.xadd(contract.control_stream(run_id), fields)
    return cmd_id, fields


def test_a_replay_inside_the_window_is_refused_by_its_nonce_after_the_id_memory_is_lost(
        tiny, start_trainer, redis_url, redis_client, run_id, until, monkeypatch):
    from training.checkpoint import Checkpoints

    # The window widened for this test only: what it tests is the memory, and a slow box must not turn the replay
    # into a stale one (refused for another reason).
    monkeypatch.setattr("observatory.contract.commands.STALE_AFTER_S", 3600)
    monkeypatch.setattr(contract, "NONCE_MEMORY_S", 3630)
    cfg = tiny.load(checkpoint={"keep_last": 1000})
    bg = start_trainer(cfg, run_id, redis_url)
    bg.wait_step(2)
    cp, _ = _send(redis_client, run_id, "checkpoint")
    assert _final(redis_client, run_id, cp, until)["status"] == "applied"
    before = bg.trainer.checkpointer.store.steps()[-1]
    cid, captured = _send(redis_client, run_id, "set-lr-multiplier", {"value": 0.5})
    assert _final(redis_client, run_id, cid, until)["status"] == "applied"
    bg.wait_step(bg.trainer.state.step + 2)
    bg.trainer.request_stop("test")
    assert bg.join() == 0
    # the id memory lost both ways: the newer checkpoints deleted (the stop's remembered the command) ...
    store = Checkpoints(Path(cfg.checkpoint.dir) / run_id)
    newer = [s for s in store.steps() if s > before]
    assert newer and cid in store.read_meta(newer[-1])["commands"]
    for step in newer:
        store.delete(step)
    assert cid not in store.read_meta(before)["commands"]
    store.close()
    redis_client.delete(contract.seen_commands_key(run_id))  # ... and the seen-id hash
    bg = start_trainer(cfg, run_id, redis_url)
    bg.wait_step(before + 1)
    assert bg.trainer.schedule.multiplier == 1.0 and cid not in bg.trainer.state.commands
    redis_client.xadd(contract.control_stream(run_id), captured)  # the captured entry, unchanged
    ack = _final(redis_client, run_id, cid, until, after=1)
    assert ack["status"] == "rejected" and ack["detail"].startswith("replayed: nonce"), ack
    assert bg.trainer.schedule.multiplier == 1.0 and cid not in bg.trainer.state.commands
    # the same change as a new command (new id, new nonce) goes through
    again, _ = _send(redis_client, run_id, "set-lr-multiplier", {"value": 0.5})
    assert _final(redis_client, run_id, again, until)["status"] == "applied"
    assert bg.trainer.schedule.multiplier == 0.5
