"""End to end with every real part: the JAX trainer → Redis → ingest → database, and → daphne → a WebSocket."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import websockets

from observatory import contract

from .servers import free_port, start_daphne, start_ingest, stop

ROOT = Path(__file__).resolve().parents[2]

TINY_TOML = """
[run]
name = "e2e"
seed = 1
[model]
vocab_size = 256
d_model = 32
n_layers = 2
n_heads = 2
n_kv_heads = 1
d_ff = 64
seq_len = 32
mlp = "moe"
[model.moe]
n_routed = 4
top_k = 2
n_shared = 1
[train]
batch_size = 4
token_budget = 1000000
[data]
builtin_domains = ["python_stdlib", "licenses"]
max_bytes_per_domain = 200000
[checkpoint]
dir = "{ckpt}"
every_steps = 0
every_minutes = 0.0
[sinks]
heartbeat_s = 0.5
"""


def _wait(pred, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = pred()
        if out:
            return out
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def _get_json(url: str):
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return json.loads(resp.read())
    except Exception:
        return None


async def _ws_collect(url: str, origin: str, want_step: int, timeout: float) -> dict[int, float]:
    """Subscribe to train/loss and collect steps until `want_step` has arrived (live, after any backfill)."""
    got: dict[int, float] = {}
    async with websockets.connect(url, origin=origin) as ws:
        await ws.send(json.dumps({"type": "resume", "metrics": ["train/loss"], "after_step": -1}))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and want_step not in got:
            msg = json.loads(await asyncio.wait_for(ws.recv(), timeout=deadline - time.monotonic()))
            s = msg.get("series", {}).get("train/loss")
            if s:
                got.update(zip(s["steps"], s["values"]))
    return got


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_trainer_points_reach_the_database_and_a_websocket(live_env, tmp_path, run_id, redis_client):
    from webapp.metrics.models import Point, Series

    port = free_port()
    cfg = tmp_path / "tiny.toml"
    cfg.write_text(TINY_TOML.format(ckpt=tmp_path / "ckpt"))
    procs = [start_daphne(port, live_env), start_ingest(live_env)]
    trainer = None
    try:
        _wait(lambda: _get_json(f"http://127.0.0.1:{port}/api/runs/") is not None, 30, "daphne")
        trainer = subprocess.Popen([sys.executable, "-m", "training", "run", "--config", str(cfg),
                                    "--run-id", run_id, "--steps", "40", "--fresh"], cwd=ROOT, env=live_env,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        # The run appears in the API once ingest has seen its first messages.
        _wait(lambda: _get_json(f"http://127.0.0.1:{port}/api/runs/{run_id}/"), 120, "the run in the API")
        # A WebSocket client sees live points arrive while the trainer is still training.
        got = asyncio.run(_ws_collect(f"ws://127.0.0.1:{port}/ws/runs/{run_id}/",
                                      f"http://127.0.0.1:{port}", want_step=30, timeout=120))
        assert 30 in got and all(isinstance(v, float) for v in got.values())
        assert trainer.wait(120) == 0, trainer.stderr.read().decode()[-2000:]
        # Every step's loss is in the database exactly once.
        series = _wait(lambda: Series.objects.filter(run_id=run_id, name=contract.M_LOSS).first(), 30,
                       "the loss series")
        _wait(lambda: Point.objects.filter(series=series).count() == 40, 30, "40 loss points")
        steps = sorted(Point.objects.filter(series=series).values_list("step", flat=True))
        assert steps == list(range(40)) or steps == list(range(1, 41))
        api = _get_json(f"http://127.0.0.1:{port}/api/runs/{run_id}/metrics/{contract.M_LOSS}/?points=1000")
        assert api["steps"] == steps
        losses = [v for v in api["values"] if v is not None]
        assert len(losses) == 40 and losses[-1] < losses[0]  # it learns from real text
        names = {s["name"] if isinstance(s, dict) else s
                 for s in (_get_json(f"http://127.0.0.1:{port}/api/runs/{run_id}/metrics/") or {}).get("metrics", [])}
        assert {contract.M_LR, contract.M_GRAD_NORM, contract.M_TOKENS_PER_S, contract.M_DROP} <= names
    finally:
        for p in ([trainer] if trainer else []) + procs:
            stop(p)
