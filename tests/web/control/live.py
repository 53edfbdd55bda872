"""Helpers for the panel's browser tests: a real trainer subprocess on a tiny config (the demo config with --set
overrides; batches big enough that it publishes tens of steps a second, not hundreds, which ingest keeps up with
on a busy machine), signed-in browser sessions, and plain HTTP checks that do not touch the ORM (Playwright's
thread may not)."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

from django.test import Client

from ..accounts.conftest import make_user
from ..servers import ROOT

TINY = {"model.d_model": 32, "model.n_layers": 2, "model.n_heads": 2, "model.n_kv_heads": 1, "model.d_ff": 64,
        "model.seq_len": 64, "model.moe.n_routed": 4, "model.moe.top_k": 2, "model.moe.n_shared": 1,
        "model.moe.group_size": 64, "train.batch_size": 8, "train.token_budget": 100_000_000, "train.eval_every": 0,
        "train.warmup_ratio": 0.0, "data.builtin_domains": '["python_stdlib", "licenses"]',
        "data.max_bytes_per_domain": 200_000, "checkpoint.every_steps": 50, "checkpoint.every_minutes": 0,
        "checkpoint.keep_last": 3, "checkpoint.recent_every": 10, "checkpoint.recent_steps": 100_000,
        "sinks.heartbeat_s": 0.5}


def start_trainer(env: dict, run_id: str, ckpt_dir: Path, log_path: Path, **overrides) -> subprocess.Popen:
    values = {**TINY, **{k.replace("__", "."): v for k, v in overrides.items()},
              "checkpoint.dir": json.dumps(str(ckpt_dir))}
    sets = [a for k, v in values.items() for a in ("--set", f"{k}={v}")]
    return subprocess.Popen([sys.executable, "-m", "training", "run", "--config", "training/configs/demo.toml",
                             "--run-id", run_id, "--fresh", *sets], cwd=ROOT, env=env,
                            stdout=open(log_path, "w"), stderr=subprocess.STDOUT)


def session(username: str, role: str) -> str:
    """A signed-in session for a new user with this role: the sessionid cookie's value."""
    client = Client()
    client.force_login(make_user(username, role))
    return client.cookies["sessionid"].value


def cookie_for(url: str, sessionid: str) -> list[dict]:
    return [{"name": "sessionid", "value": sessionid, "url": url}]


def http(url: str, sessionid: str | None = None) -> tuple[int, dict | None]:
    req = urllib.request.Request(url, headers={"Cookie": f"sessionid={sessionid}"} if sessionid else {})
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            body = resp.read()
            status = resp.status
    except urllib.error.HTTPError as e:
        body, status = e.read(), e.code
    except OSError:
        return 0, None
    try:
        return status, json.loads(body)
    except ValueError:
        return status, None


def command_row(run_id: str, command: str) -> str:
    """JS: the newest command row of this kind for this run, or null."""
    return (f"document.querySelector('#op-commands tr[data-run=\"{run_id}\"] td code') && "
            f"[...document.querySelectorAll('#op-commands tr[data-run=\"{run_id}\"]')]"
            f".find(tr => tr.querySelector('code').textContent === '{command}')")
