"""A rollback on a multi-process job: process 0 reads the command, every process obeys it at the same step
boundary (the control broadcast), restores the checkpoint collectively, process 0 alone sets the newer
checkpoints aside, and the losses after the rollback equal a single-process run given the same rollback.

The command is queued on the run's control stream before the second leg starts, so it is applied at the first
boundary that the reader has delivered it to, whichever that is: the losses after the rollback depend only on the
restored checkpoint and the skipped batches, not on when the command landed.
"""

from __future__ import annotations

import os
import subprocess
import uuid

import pytest

from observatory import contract
from tests.support import free_port

# 8 sequences x 32 tokens; 4 devices each hold 2 sequences, i.e. whole dispatch groups of 32 tokens.
TINY = dict(train={"batch_size": 8, "eval_every": 0}, model__moe={"group_size": 32, "n_routed": 8},
            checkpoint={"every_steps": 5, "keep_last": 100})
FIRST, LAST, TARGET, SKIP = 15, 25, 10, 3


def _env(devices: int, **extra: str) -> dict:
    flags = f"--xla_force_host_platform_device_count={devices} --xla_backend_optimization_level=0"
    return {**os.environ, "XLA_FLAGS": flags, "JAX_PLATFORMS": "cpu", **extra}


def _send_rollback(client, run_id: str) -> str:
    cmd_id = uuid.uuid4().hex
    fields = contract.command_fields(cmd_id, "rollback", {"step": TARGET, "skip_batches": SKIP}, "test", "tester")
    key = contract.load_run_control_key(run_id)
    client.xadd(contract.control_stream(run_id), contract.sign_command(run_id, fields, key))
    return cmd_id


def _run(trainer_cli, cfg, run_id: str, steps: int, out, redis_url: str, processes: int) -> list[str]:
    """One leg of the run on 1 process x 1 device, or 2 processes x 2 devices; every process's output."""
    args = ("--steps", str(steps), "--run-id", run_id, "--metrics-jsonl", str(out), "--redis-url", redis_url)
    if processes == 1:
        p = trainer_cli.run(cfg, *args, "--set", "mesh.data=1", env=_env(1), timeout=300)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        return [p.stdout + p.stderr]
    port, procs = free_port(), []
    for pid in range(processes):
        env = _env(2, OBS_COORDINATOR=f"127.0.0.1:{port}", OBS_NUM_PROCESSES=str(processes), OBS_PROCESS_ID=str(pid))
        procs.append(trainer_cli.popen(cfg, *args, "--set", "mesh.data=2", "--set", "mesh.expert=2", env=env,
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    try:
        logs = [p.communicate(timeout=300)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert [p.returncode for p in procs] == [0] * processes, "\n---\n".join(x[-3000:] for x in logs)
    return logs


def _rolled_back_run(trainer_cli, tiny, tmp_path, redis_client, redis_url, processes: int):
    run_id = f"rb{processes}-{uuid.uuid4().hex[:8]}"
    cfg, out = tiny(f"{run_id}.toml", **TINY), tmp_path / f"{run_id}.jsonl"
    _run(trainer_cli, cfg, run_id, FIRST, out, redis_url, processes)
    cmd_id = _send_rollback(redis_client, run_id)
    logs = _run(trainer_cli, cfg, run_id, LAST, out, redis_url, processes)
    acks = [{k.decode(): v.decode() for k, v in f.items()}
            for _, f in redis_client.xrange(contract.ack_stream(run_id))]
    applied = [a for a in acks if a["id"] == cmd_id and a["status"] == "applied"]
    assert len(applied) == 1 and f"rolled back to step {TARGET}" in applied[0]["detail"], acks
    return run_id, out, logs


@pytest.mark.slow
def test_a_rollback_on_two_processes_matches_one_process(trainer_cli, tiny, tmp_path, jsonl, redis_client, redis_url):
    _, one_out, _ = _rolled_back_run(trainer_cli, tiny, tmp_path, redis_client, redis_url, processes=1)
    run_id, two_out, logs = _rolled_back_run(trainer_cli, tiny, tmp_path, redis_client, redis_url, processes=2)
    # Every process restored the checkpoint (a collective read), at the same boundary.
    for log in logs:
        assert f"restored checkpoint step {TARGET}" in log, log[-3000:]
    records = jsonl(two_out)  # process 0 alone publishes
    rollbacks = [r["payload"] for r in records if r["kind"] == "event" and r["name"] == "rollback"]
    assert len(rollbacks) == 1 and rollbacks[0]["to_step"] == TARGET and rollbacks[0]["skip_batches"] == SKIP
    assert FIRST in rollbacks[0]["set_aside"]
    ck = tmp_path / "ckpt" / run_id
    assert len(list(ck.glob("abandoned-*"))) == 1  # set aside once (by process 0), not once per process
    assert (ck / str(LAST)).is_dir()

    def losses(path):
        out = {}
        for r in jsonl(path):  # the last publication of a step wins: steps after the rollback supersede
            if r["kind"] == "metrics":
                out[r["step"]] = r["values"][contract.M_LOSS]
        return out

    one, two = losses(one_out), losses(two_out)
    assert sorted(one) == sorted(two) == list(range(1, LAST + 1))
    bad = {s: (two[s], one[s]) for s in one if abs(two[s] - one[s]) > 1e-4 * abs(one[s])}
    assert not bad, f"losses differ from the 1-process run (step: 2 processes, 1 process): {bad}"
    firsts = {}
    for r in jsonl(two_out):
        if r["kind"] == "metrics":
            firsts.setdefault(r["step"], r["values"][contract.M_LOSS])
    assert firsts[TARGET + 1] != two[TARGET + 1]  # the skipped batches changed what step 11 trained on
