"""The issue's done-when: 10k steps from a plain Python loop through the client, in Redis mode and in HTTP mode
(a real uvicorn and ingest), and from an unchanged wandb-style script, read back through the API identical."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import urllib.request

import pytest

import observatory.client as obs
from observatory import contract
from webapp.accounts.models import WriteToken

from ..accounts.conftest import make_user
from ..servers import ROOT, wait_ingested
from .wandb_style_script import loss_at

STEPS = 10_000
SERIES = f"metrics/{contract.M_LOSS}/?points={STEPS}"


def _loop(run) -> None:
    """A plain-Python training loop."""
    for step in range(STEPS):
        run.log({contract.M_LOSS: loss_at(step), contract.M_TOTAL_TOKENS: 512 * (step + 1)})


def _assert_identical(body: dict) -> None:
    assert body["exact"] and body["steps"] == list(range(STEPS))
    for step, value in zip(body["steps"], body["values"]):
        want = loss_at(step)
        assert value == want if math.isfinite(want) else value is None, step
    assert body["nonfinite"] == [[4321, "NaN"]]


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())


@pytest.mark.django_db
def test_10k_steps_in_redis_mode_read_back_identical(redis_url, redis_client, ingestor, run_id, client):
    with obs.init(name="plain", run_id=run_id, url=redis_url, finish_at_exit=False) as run:
        _loop(run)
    assert run.stats()["dropped"] == 0 and run.stats()["queue_depth"] == 0
    ingestor.drain()
    _assert_identical(client.get(f"/api/runs/{run_id}/{SERIES}").json())
    detail = client.get(f"/api/runs/{run_id}/").json()
    assert detail["state"] == "stopped" and detail["last_step"] == STEPS - 1 and detail["name"] == "plain"


def _publisher(run_id: str) -> str:
    user = make_user("alice", "member")
    return WriteToken.issue(user, "roundtrip", [run_id])[1]


@pytest.mark.slow
def test_10k_steps_in_http_mode_read_back_identical(servers, run_id):
    secret = _publisher(run_id)
    servers.wait_web()
    with obs.init(name="plain-http", run_id=run_id, url=servers.url, token=secret, finish_at_exit=False) as run:
        _loop(run)
    st = run.stats()
    assert st["dropped"] == 0 and st["rejected"] == 0 and st["queue_depth"] == 0
    wait_ingested(run_id, STEPS - 1)
    _assert_identical(_get(f"{servers.url}/api/runs/{run_id}/{SERIES}"))
    detail = _get(f"{servers.url}/api/runs/{run_id}/")
    assert detail["state"] == "stopped" and detail["heartbeat"]["tokens"] == 512 * STEPS


@pytest.mark.slow
def test_an_unchanged_wandb_style_script_streams_10k_steps_over_http(servers, run_id):
    secret = _publisher(run_id)
    servers.wait_web()
    env = {**servers.env, "OBS_URL": servers.url, "OBS_TOKEN": secret}
    proc = subprocess.run([sys.executable, str(ROOT / "tests/web/intake/wandb_style_script.py"), run_id,
                           str(STEPS)], cwd=ROOT, env=env, capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    wait_ingested(run_id, STEPS - 1)
    _assert_identical(_get(f"{servers.url}/api/runs/{run_id}/{SERIES}"))
    detail = _get(f"{servers.url}/api/runs/{run_id}/")
    assert detail["state"] == "stopped" and detail["config"] == {"lr": 3e-4, "steps": STEPS}
