"""The trainer on a device mesh: data x expert training equals one device, state is sharded, and a run killed
on 8 devices resumes exactly on 4 and then 2 (orbax restores into the new mesh's shardings).

The device count is fixed when JAX starts, so every run is the real CLI in a subprocess with
XLA_FLAGS=--xla_force_host_platform_device_count=N.
"""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from observatory import contract
from tests.support import free_port

STEPS = 30
# 8 sequences x 32 tokens: on 8 devices each holds one sequence, i.e. one whole dispatch group of 32 tokens.
MESH_TINY = dict(train={"batch_size": 8, "eval_every": 10}, model__moe={"group_size": 32, "n_routed": 8},
                 checkpoint={"every_steps": 5})


def _env(devices: int) -> dict:
    # Optimisation level 0 compiles ~2x faster; every run here uses it, so all compare like with like.
    flags = f"--xla_force_host_platform_device_count={devices} --xla_backend_optimization_level=0"
    return {**os.environ, "XLA_FLAGS": flags, "JAX_PLATFORMS": "cpu"}


def _mesh_args(data: int, expert: int) -> list[str]:
    return ["--set", f"mesh.data={data}", "--set", f"mesh.expert={expert}", "--no-redis"]


def _losses(records: list[dict]) -> dict[int, float]:
    return {r["step"]: r["values"][contract.M_LOSS] for r in records if r["kind"] == "metrics"}


def _event(records: list[dict], name: str) -> list[dict]:
    return [r["payload"] for r in records if r["kind"] == "event" and r["name"] == name]


def _assert_close(got: dict[int, float], want: dict[int, float]) -> None:
    assert got, "no losses published"
    bad = {s: (v, want[s]) for s, v in got.items() if abs(v - want[s]) > 1e-4 * abs(want[s])}
    assert not bad, f"losses differ from the 1-device run (step: got, want): {bad}"


_REFERENCE: list[list[dict]] = []


@pytest.fixture
def reference(tiny, trainer_cli, jsonl, tmp_path) -> list[dict]:
    """30 steps on one device (run once per session): the losses every mesh must reproduce, its state memory."""
    if not _REFERENCE:
        out = tmp_path / "ref.jsonl"
        p = trainer_cli.run(tiny(**MESH_TINY), "--steps", str(STEPS), "--run-id", "ref", "--metrics-jsonl",
                            str(out), *_mesh_args(1, 1), env=_env(1))
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
        _REFERENCE.append(jsonl(out))
    return _REFERENCE[0]


@pytest.mark.slow
def test_data2_expert4_on_8_devices_matches_one_device_and_shards_the_experts(reference, tiny, trainer_cli, jsonl,
                                                                            tmp_path):
    out = tmp_path / "m8.jsonl"
    p = trainer_cli.run(tiny(**MESH_TINY), "--steps", str(STEPS), "--run-id", "m8", "--metrics-jsonl", str(out),
                        *_mesh_args(2, 4), env=_env(8))
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    records = jsonl(out)
    want = _losses(reference)
    assert sorted(_losses(records)) == sorted(want) == list(range(1, STEPS + 1))
    _assert_close(_losses(records), want)
    evals = [r["values"][contract.M_EVAL_LOSS] for r in records
             if r["kind"] == "metrics" and contract.M_EVAL_LOSS in r["values"]]
    ref_evals = [r["values"][contract.M_EVAL_LOSS] for r in reference
                 if r["kind"] == "metrics" and contract.M_EVAL_LOSS in r["values"]]
    assert len(evals) == len(ref_evals) == 3 and all(abs(a - b) < 1e-4 * b for a, b in zip(evals, ref_evals))
    one, eight = _event(reference, "compiled")[0], _event(records, "compiled")[0]
    assert eight["mesh"] == {"data": 2, "expert": 4} and one["mesh"] == {"data": 1, "expert": 1}
    # Routed experts and their two Adam moments: each device holds a quarter of them.
    assert eight["expert_state_bytes_per_device"] * 4 == one["expert_state_bytes_per_device"]
    assert eight["state_bytes_per_device"] < one["state_bytes_per_device"]


@pytest.mark.slow
def test_killed_on_8_devices_it_resumes_on_4_then_2_and_continues_exactly(reference, tiny, trainer_cli, jsonl, until,
                                                                          tmp_path):
    cfg, out = tiny(**MESH_TINY), tmp_path / "run.jsonl"
    proc = trainer_cli.popen(cfg, "--run-id", "moves", "--metrics-jsonl", str(out), *_mesh_args(4, 2),
                             env=_env(8), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def ready():
        records = jsonl(out)
        written = {e["step"] for e in _event(records, "checkpoint_written")}
        return proc.poll() is not None or (10 in written and max(_losses(records), default=0) >= 12)

    until(ready, 300, "checkpoint 10 and step 12 on 8 devices")
    assert proc.poll() is None, proc.stderr.read()[-2000:]
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    # Resume on 4 devices (all four on the expert axis) up to step 20, then on 2 devices to the end.
    for steps, (data, expert) in ((20, (1, 4)), (STEPS, (1, 2))):
        p = trainer_cli.run(cfg, "--steps", str(steps), "--run-id", "moves", "--metrics-jsonl", str(out),
                            *_mesh_args(data, expert), env=_env(data * expert))
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    records = jsonl(out)
    resumed = [e["from_checkpoint"] for e in _event(records, "resumed")]
    assert resumed[0] >= 10 and resumed[1] == 20
    assert [e["mesh"] for e in _event(records, "compiled")] == [{"data": 4, "expert": 2}, {"data": 1, "expert": 4},
                                                                {"data": 1, "expert": 2}]
    got = {}
    for r in records:  # the last publication of each step wins (steps after a resume point are re-run)
        if r["kind"] == "metrics":
            got[r["step"]] = r["values"][contract.M_LOSS]
    assert max(got) == STEPS
    _assert_close(got, _losses(reference))


@pytest.mark.slow
def test_two_processes_of_two_devices_through_the_coordinator_match_one_device(reference, tiny, trainer_cli, jsonl,
                                                                               tmp_path):
    cfg, out = tiny(**MESH_TINY), tmp_path / "mp.jsonl"
    port = free_port()
    procs = []
    for pid in (0, 1):
        env = {**_env(2), "OBS_COORDINATOR": f"127.0.0.1:{port}", "OBS_NUM_PROCESSES": "2", "OBS_PROCESS_ID": str(pid)}
        procs.append(trainer_cli.popen(cfg, "--steps", str(STEPS), "--run-id", "mp", "--metrics-jsonl", str(out),
                                       *_mesh_args(2, 2), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    try:
        logs = [p.communicate(timeout=1200)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert [p.returncode for p in procs] == [0, 0], "\n---\n".join(x[-3000:] for x in logs)
    records = jsonl(out)  # process 0 alone publishes
    compiled = _event(records, "compiled")
    assert len(compiled) == 1 and compiled[0]["processes"] == 2 and compiled[0]["mesh"] == {"data": 2, "expert": 2}
    assert sorted(_losses(records)) == list(range(1, STEPS + 1))
    _assert_close(_losses(records), _losses(reference))
    # checkpoints were written collectively: the last one holds every expert shard and reads back on one device
    assert (tmp_path / "ckpt" / "mp" / str(STEPS)).is_dir()
