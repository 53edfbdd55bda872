"""Plumbing shared by the tests and the benches: free ports, waits on a condition, private redis-server processes,
stopping a child process. Imported as `tests.support`: pytest (pytest.ini `pythonpath`) and every bench put the
repository root on sys.path. Each wait polls a real condition; its timeout only bounds a failure."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

# the one definition, `make run`'s; re-exported for tests and benches
from deploy.run_local import free_port  # noqa: F401


def listening(port: int, host: str = "127.0.0.1") -> bool:
    try:
        socket.create_connection((host, port), timeout=0.2).close()
        return True
    except OSError:
        return False


def wait_for(condition, timeout: float, what: str, every: float = 0.1):
    """condition() until it returns something truthy (returned); AssertionError naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        out = condition()
        if out:
            return out
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(every)


def wait_port(port: int, timeout: float = 300, proc: subprocess.Popen | None = None) -> None:
    """Until something listens on `port`; given the server's `proc`, AssertionError at once if it exits first. The
    timeout only bounds a hang: a Django server's start-up on two busy cores took over 30 s (CI, 2026-12-07)."""
    def up():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the server for port {port} exited with {proc.returncode} before listening")
        return listening(port)

    wait_for(up, timeout, f"a server listening on port {port}")


def stop(proc: subprocess.Popen, timeout: float = 15) -> int:
    """SIGTERM, then SIGKILL after `timeout`; the exit code."""
    stop_all([proc], timeout)
    return proc.returncode


def stop_all(procs: list[subprocess.Popen], timeout: float = 15) -> None:
    """stop() for several processes: SIGTERM to all first, so that they wind down together, then each waited for
    (SIGKILL after `timeout`)."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


class PrivateRedis:
    """A redis-server of its own on a free port (no RDB snapshots; an append-only file if asked), so that a test can
    start it late, restart it (empty, or from its append-only file), pause or kill it, and a bench shares nothing.
    `directory` None: a temporary one, removed by close(). As a context manager: started, then closed."""

    def __init__(self, directory: str | Path | None = None, appendonly: bool = False):
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._own_dir = directory is None
        self.dir = Path(tempfile.mkdtemp(prefix="obs-redis-") if directory is None else directory)
        self.appendonly = appendonly
        self.proc: subprocess.Popen | None = None

    def start(self):
        """Start the server; a client on it once it answers (after loading its append-only file)."""
        import redis as redis_lib

        exe = shutil.which("redis-server")
        if not exe:
            raise RuntimeError("redis-server is not on PATH (apt-get install -y redis-server)")
        persist = ["--appendonly", "yes", "--appendfsync", "everysec"] if self.appendonly else ["--appendonly", "no"]
        self.proc = subprocess.Popen([exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                      *persist, "--dir", str(self.dir)], stdout=subprocess.DEVNULL)
        client = redis_lib.Redis(port=self.port)

        def up():
            assert self.proc.poll() is None, f"redis-server exited with {self.proc.returncode}"
            try:
                return client.ping()
            except redis_lib.RedisError:  # connection refused, or still loading its append-only file
                return False

        wait_for(up, 10, "the private redis-server to answer", every=0.02)
        return client

    def stop(self, kill: bool = False) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
            self.proc.wait(10)

    def restart(self, kill: bool = False):
        self.stop(kill)
        return self.start()

    def close(self) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "PrivateRedis":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()
