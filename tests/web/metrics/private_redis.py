"""A redis-server of a test's own, so that it can be restarted (empty, or from its append-only file) or killed
without touching the shared one."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess

import redis as redis_lib

from ..servers import wait_for


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PrivateRedis:
    def __init__(self, directory, appendonly: bool = False):
        self.port = _free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.dir = directory
        self.appendonly = appendonly
        self.proc = None

    def start(self) -> redis_lib.Redis:
        exe = shutil.which("redis-server")
        assert exe, "redis-server is not on PATH (apt-get install -y redis-server)"
        persist = ["--appendonly", "yes", "--appendfsync", "everysec"] if self.appendonly else ["--appendonly", "no"]
        self.proc = subprocess.Popen([exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                      *persist, "--dir", str(self.dir)], stdout=subprocess.DEVNULL)
        client = redis_lib.Redis(port=self.port)

        def up():
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

    def restart(self, kill: bool = False) -> redis_lib.Redis:
        self.stop(kill)
        return self.start()
