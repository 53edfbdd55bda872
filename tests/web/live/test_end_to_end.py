"""End to end with every real part: the JAX trainer → Redis → ingest → database, and → uvicorn → a WebSocket."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

import pytest
import websockets

from observatory import contract
from tests.tiny import WEB_TINY, TinyConfigs

from ..servers import ROOT, get_json, stop, wait_for

async def _ws_collect(url: str, origin: str, want_step: int, timeout: float) -> dict[int, float]:
    """Subscribe to the loss and collect steps until `want_step` has arrived (live, after any backfill)."""
    got: dict[int, float] = {}
    async with websockets.connect(url, origin=origin) as ws:
        await ws.send(json.dumps({"type": "resume", "metrics": [contract.M_LOSS], "after_step": -1}))
        deadline = time.monotonic() + timeout
        while want_step not in got:
            msg = json.loads(await asyncio.wait_for(ws.recv(), timeout=deadline - time.monotonic()))
            for frame in msg if isinstance(msg, list) else [msg]:  # the hub batches frames as a list
                s = frame.get("series", {}).get(contract.M_LOSS)
                if s:
                    got.update(zip(s["steps"], s["values"]))
    return got


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_trainer_points_reach_the_database_and_a_websocket(servers, tmp_path, run_id, redis_client):
    from webapp.metrics.models import Point, Series

    cfg = TinyConfigs(tmp_path)("tiny.toml", run={"name": "e2e", "seed": 1}, train={"lr": 3e-3, "allow_faults": False},
                                **WEB_TINY)
    api = f"{servers.url}/api/runs"
    wait_for(lambda: get_json(f"{api}/") is not None, 300, "uvicorn")
    trainer = subprocess.Popen([sys.executable, "-m", "training", "run", "--config", str(cfg), "--run-id", run_id,
                                "--steps", "40", "--fresh"], cwd=ROOT, env=servers.env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE)
    try:
        # The run appears in the API once ingest has seen its first messages. (Each timeout only bounds a hang: the
        # trainer's start-up and compile on two cores under the full suite took minutes.)
        wait_for(lambda: get_json(f"{api}/{run_id}/"), 300, "the run in the API")
        # A WebSocket client sees live points arrive while the trainer is still training.
        got = asyncio.run(_ws_collect(f"ws://127.0.0.1:{servers.port}/ws/runs/{run_id}/", servers.url,
                                      want_step=30, timeout=300))
        assert 30 in got and all(isinstance(v, float) for v in got.values())
        assert trainer.wait(300) == 0, trainer.stderr.read().decode()[-2000:]
        # Every step's loss is in the database exactly once.
        series = wait_for(lambda: Series.objects.filter(run_id=run_id, name=contract.M_LOSS).first(), 30,
                          "the loss series")
        wait_for(lambda: Point.objects.filter(series=series).count() == 40, 30, "40 loss points")
        steps = sorted(Point.objects.filter(series=series).values_list("step", flat=True))
        assert steps == list(range(40)) or steps == list(range(1, 41))
        body = get_json(f"{api}/{run_id}/metrics/{contract.M_LOSS}/?points=1000")
        assert body["steps"] == steps
        losses = [v for v in body["values"] if v is not None]
        assert len(losses) == 40 and losses[-1] < losses[0]  # it learns from real text
        names = {s["name"] for s in (get_json(f"{api}/{run_id}/metrics/") or {}).get("metrics", [])}
        assert {contract.M_LR, contract.M_GRAD_NORM, contract.M_TOKENS_PER_S, contract.M_DROP} <= names
    finally:
        stop(trainer)
