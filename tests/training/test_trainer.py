"""The real trainer on a tiny MoE config: end to end through the CLI and Redis, absent Redis, divergence."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from observatory import contract

ROOT = Path(__file__).resolve().parents[1]

TINY = {
    "run": {"name": "tiny", "seed": 3},
    "model": {"vocab_size": 256, "d_model": 32, "n_layers": 2, "n_heads": 2, "n_kv_heads": 1, "d_ff": 64,
              "seq_len": 32, "mlp": "moe"},
    "model.moe": {"n_routed": 4, "top_k": 2, "n_shared": 1},
    "train": {"batch_size": 4, "lr": 1e-2, "token_budget": 1_000_000, "allow_faults": True},
    "data": {"builtin_domains": ["python_stdlib", "licenses"], "max_bytes_per_domain": 200_000},
    "checkpoint": {"every_steps": 7, "every_minutes": 0.0, "keep_last": 3, "keep_every": 0},
    "sinks": {"heartbeat_s": 0.3},
}


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {_toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(v)


def tiny_config(tmp_path: Path, name: str = "tiny.toml", **sections) -> Path:
    """Write the tiny config (checkpoints under tmp_path) with per-table overrides, e.g. train={"lr": 1.0}."""
    tables = {k: dict(v) for k, v in TINY.items()}
    tables["checkpoint"]["dir"] = str(tmp_path / "ckpt")
    for table, values in sections.items():
        tables.setdefault(table.replace("__", "."), {}).update(values)
    text = "\n".join(f"[{t}]\n" + "\n".join(f"{k} = {_toml_value(v)}" for k, v in vals.items()) + "\n"
                     for t, vals in tables.items())
    path = tmp_path / name
    path.write_text(text)
    return path


def load_tiny(tmp_path: Path, **sections):
    from training.config import load

    return load(tiny_config(tmp_path, **sections))


def trainer_cmd(config: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "training", "run", "--config", str(config), *args]


def run_cli(config: Path, *args: str, timeout: float = 120, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(trainer_cmd(config, *args), cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def jsonl(path: Path) -> list[dict]:
    from training.sinks import JsonlSink

    return list(JsonlSink.read(path)) if path.exists() else []


def stream(client, run_id: str) -> list[contract.Message]:
    return [contract.decode(f, expect_run=run_id) for _, f in client.xrange(contract.telemetry_stream(run_id))]


class BackgroundTrainer:
    """The real Trainer on a thread of this process (faster than a subprocess; same code path as the CLI)."""

    def __init__(self, cfg, run_id: str, redis_url: str | None, jsonl_path: Path | None = None, **kw):
        from training.train import Trainer

        self.trainer = Trainer(cfg, run_id, redis_url=redis_url, metrics_jsonl=str(jsonl_path) if jsonl_path
                               else None, log=lambda m: None, **kw)
        self.rc = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        self.rc = self.trainer.run()

    def __enter__(self):
        self.thread.start()
        return self

    def wait_step(self, step: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while self.trainer.step < step:
            assert self.thread.is_alive(), f"trainer exited early with {self.rc}"
            assert time.monotonic() < deadline, f"trainer stuck at step {self.trainer.step}"
            time.sleep(0.02)

    def join(self, timeout: float = 60) -> int:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "trainer did not stop"
        return self.rc

    def __exit__(self, *exc):
        if self.thread.is_alive():
            self.trainer.request_stop("test teardown")
            self.trainer.paused = False
            self.thread.join(60)


# ---------------------------------------------------------------------------------------------- tests
REQUIRED_METRICS = ("train/loss", "train/cross_entropy_loss", "optim/learning_rate", "grad/norm/total",
                    "throughput/tokens_per_second", "throughput/mfu", "throughput/total_tokens", "time/step_s",
                    "moe/drop_fraction", "train/router/layer_0/routing_entropy",
                    "train/router/layer_1/routing_hist/3", "mixture/stage")


@pytest.mark.slow
def test_the_cli_trains_and_publishes_the_contract_through_redis(tmp_path, redis_client, run_id):
    out = tmp_path / "m.jsonl"
    p = run_cli(tiny_config(tmp_path), "--steps", "12", "--run-id", run_id, "--metrics-jsonl", str(out))
    assert p.returncode == 0, p.stderr[-3000:]
    msgs = stream(redis_client, run_id)  # every entry validates against the contract
    kinds = [m.kind for m in msgs]
    assert kinds[0] == "run" and kinds.count("manifest") == 1 and "heartbeat" in kinds
    run = msgs[0].data
    assert run["name"] == "tiny" and run["config"]["model"]["moe"]["n_routed"] == 4
    states = [m.data["state"] for m in msgs if m.kind == "state"]
    assert states[:3] == ["starting", "compiling", "training"] and states[-1] == "stopped"
    assert "checkpointing" in states
    metrics = [m.data for m in msgs if m.kind == "metrics"]
    assert [d["step"] for d in metrics] == list(range(1, 13))
    for name in REQUIRED_METRICS:
        assert name in metrics[-1]["values"], name
    domains = {"python_stdlib", "licenses"}
    assert any(f"train/loss/{d}" in m["values"] for m in metrics for d in domains)
    assert {f"data/tokens_seen/{d}" for d in domains} <= set(metrics[-1]["values"])
    assert metrics[-1]["values"]["throughput/total_tokens"] == 12 * 4 * 32
    assert all(math.isfinite(d["values"]["train/loss"]) for d in metrics)
    manifest = next(m.data["manifest"] for m in msgs if m.kind == "manifest")
    assert [d["name"] for d in manifest["domains"]] == ["python_stdlib", "licenses"]
    events = {m.data["name"] for m in msgs if m.kind == "event"}
    assert {"compiled", "checkpoint_saved"} <= events
    hb = json.loads(redis_client.get(contract.heartbeat_key(run_id)))
    assert hb["phase"] == "stopped" and hb["step"] == 12
    assert redis_client.sismember(contract.RUNS_KEY, run_id)
    # the JSONL mirror holds the same records
    mirrored = [r for r in jsonl(out) if r["kind"] == "metrics"]
    assert [r["values"]["train/loss"] for r in mirrored] == [d["values"]["train/loss"] for d in metrics]


@pytest.mark.slow
def test_it_trains_without_redis_and_the_lr_warms_up(tmp_path):
    out = tmp_path / "m.jsonl"
    url = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    p = run_cli(tiny_config(tmp_path), "--steps", "6", "--run-id", "absent", "--metrics-jsonl", str(out),
                "--redis-url", url)
    assert p.returncode == 0, p.stderr[-3000:]
    metrics = [r for r in jsonl(out) if r["kind"] == "metrics"]
    assert [r["step"] for r in metrics] == list(range(1, 7))
    lrs = [r["values"]["optim/learning_rate"] for r in metrics]
    assert lrs == sorted(lrs) and lrs[0] == 0.0 and lrs[-1] > 0  # warmup: LR passed in, rising each step
    assert "dropped" in p.stdout  # the publisher's summary line


def test_it_fails_cleanly_when_the_loss_stays_non_finite(tmp_path, redis_url, redis_client, run_id):
    cfg = load_tiny(tmp_path, train={"lr": 1e30, "grad_clip": 0.0, "warmup_ratio": 0.0, "max_nonfinite_steps": 2,
                                     "weight_decay": 0.0})
    with BackgroundTrainer(cfg, run_id, redis_url) as bg:
        rc = bg.join(120)
    assert rc == 1
    msgs = stream(redis_client, run_id)
    failed = [m.data for m in msgs if m.kind == "state" and m.data["state"] == "failed"]
    assert failed and "non-finite for 2 consecutive steps" in failed[0]["detail"]
    values = [m.data["values"] for m in msgs if m.kind == "metrics"]
    # published as NaN/Inf, not dropped
    assert any(not math.isfinite(v["train/loss"]) or not math.isfinite(v["grad/norm/total"]) for v in values)
    assert values[-1]["train/finite"] == 0.0


def test_a_bad_config_prints_one_line_and_exits_2(tmp_path):
    p = run_cli(tiny_config(tmp_path, train={"batch_size": 0}), timeout=60)
    assert p.returncode == 2
    assert p.stderr.strip() == "config error: train.batch_size: must be a positive integer"
    p = run_cli(tiny_config(tmp_path, model={"n_heads": 3}), timeout=60)
    assert p.returncode == 2 and p.stderr.startswith("config error: model.n_heads: ")
    assert len(p.stderr.strip().splitlines()) == 1
    # found only when the data loads: still one line, still status 2
    p = run_cli(tiny_config(tmp_path, data={"corpora": {"mine": str(tmp_path / "nope")}}), "--no-redis", timeout=60)
    assert p.returncode == 2, p.stderr[-2000:]
    assert p.stderr.strip().splitlines()[-1].startswith("config error: data.corpora.mine: ")


@pytest.mark.slow
def test_sigterm_checkpoints_then_exits_0(tmp_path, redis_url, redis_client, run_id):
    import signal

    out = tmp_path / "m.jsonl"
    proc = subprocess.Popen(trainer_cmd(tiny_config(tmp_path), "--run-id", run_id, "--metrics-jsonl", str(out)),
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 90
    while not any(r["kind"] == "metrics" and r["step"] >= 3 for r in jsonl(out)):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    proc.send_signal(signal.SIGINT)  # a supervisor and the terminal may both deliver one: still a clean stop
    assert proc.wait(60) == 0, proc.stdout.read()[-2000:]
    states = [r for r in jsonl(out) if r["kind"] == "state"]
    assert states[-1]["state"] == "stopped" and states[-1]["detail"] in ("signal SIGTERM", "signal SIGINT")
    last = max(r["step"] for r in jsonl(out) if r["kind"] == "metrics")
    assert (tmp_path / "ckpt" / run_id / str(last)).is_dir()


def test_a_second_trainer_on_the_same_run_is_refused(tmp_path, redis_url, redis_client, run_id):
    from training.train import Trainer

    cfg = load_tiny(tmp_path)
    with BackgroundTrainer(cfg, run_id, None) as bg:
        bg.wait_step(1)
        lines = []
        assert Trainer(cfg, run_id, redis_url=None, log=lines.append).run() == 1
        assert any("is already being trained (pid" in line for line in lines)
        assert bg.thread.is_alive()
