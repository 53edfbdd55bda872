"""A throw-away redis-server for benchmarks (a free port, no persistence), so no bench shares a database."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time


@contextlib.contextmanager
def private_redis():
    """Yields the URL of a fresh redis-server; stops it and removes its directory afterwards."""
    import redis

    exe = shutil.which("redis-server")
    if not exe:
        raise SystemExit("redis-server is not on PATH")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tmp = tempfile.mkdtemp(prefix="obs-bench-redis-")
    proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", tmp], stdout=subprocess.DEVNULL)
    try:
        client = redis.Redis(port=port)
        for _ in range(400):
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.025)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)
