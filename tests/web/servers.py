"""Real server processes for browser and end-to-end tests: daphne and ingest on the test database and Redis."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout: float = 20) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"nothing listening on {port}")


def start_daphne(port: int, env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "-v", "0",
                             "webapp.asgi:application"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)


def start_ingest(env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "manage.py", "ingest", "--block-ms", "100"], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def stop(proc: subprocess.Popen) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    return proc.returncode


def wait_ingested(run_id: str, last_step: int, timeout: float = 30) -> None:
    """Until ingest has stored the run up to `last_step` (it is in a subprocess, so poll the database)."""
    from webapp.runs.models import Run

    deadline = time.time() + timeout
    while time.time() < deadline and not Run.objects.filter(pk=run_id, last_step=last_step).exists():
        time.sleep(0.1)
