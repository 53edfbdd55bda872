"""The Observatory client: stream any Python training loop's metrics to the site (`obs.init(...)` then
`run.log(...)`), over Redis or the HTTP intake, never blocking the loop. Usage: docs/CLIENT.md.
"""

from __future__ import annotations

import atexit
import os
import re
import secrets
import sys
import threading
import weakref
from typing import Any, Mapping

from observatory import contract
from observatory.client.run import Run

__all__ = ["Run", "init", "default_run_id"]

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


def default_run_id(name: str) -> str:
    """`<name>-<8 hex>`, the name reduced to the characters a run id may hold."""
    stem = re.sub(f"[^{contract.RUN_ID_CHARS}]+", "-", name).strip("-_.")[:55] or "run"
    return f"{stem}-{secrets.token_hex(4)}"


def init(name: str | None = None, config: Mapping[str, Any] | None = None, run_id: str | None = None,
         url: str | None = None, token: str | None = None, *, heartbeat_s: float = 2.0, max_queue: int = 20_000,
         finish_at_exit: bool = True) -> Run:
    """Start publishing a run: a `run` message (name, config, started_at, pid), state `training`, heartbeats.

    url: `http(s)://site` (HTTP intake, needs `token`) or `redis://host:port/db`; default OBS_URL, else
    REDIS_URL, else redis://127.0.0.1:6379/0. token: a write token from your profile page; default OBS_TOKEN.
    run_id: default `<name>-<8 hex>`. At interpreter exit an unfinished run is finished (`failed` after an
    uncaught exception) unless finish_at_exit is False.
    """
    if run_id is None:
        run_id = default_run_id(name or "run")
    elif not contract.RUN_ID_RE.match(run_id):
        raise ValueError(f"bad run id {run_id!r}: letters, digits and '_.-', starting with a letter or digit, "
                         "at most 64 characters")
    name = name or run_id
    url = url or os.environ.get("OBS_URL") or os.environ.get("REDIS_URL") or DEFAULT_REDIS_URL
    if url.startswith(("http://", "https://")):
        from observatory.client.http import HttpPublisher

        token = token or os.environ.get("OBS_TOKEN")
        if not token:
            raise ValueError("HTTP mode needs a write token: pass token=... or set OBS_TOKEN "
                             "(create one on your profile page)")
        publisher = HttpPublisher(url, token, run_id, max_queue=max_queue)
        mode, dashboard = "http", f"{url.rstrip('/')}/runs/{run_id}/"
    elif url.startswith(("redis://", "rediss://", "unix://")):
        publisher, mode, dashboard = _redis_publisher()(url, run_id, max_queue=max_queue), "redis", None
    else:
        raise ValueError(f"url must be http(s):// (the site) or redis:// (the lab's Redis), got {url!r}")
    run = Run(publisher, name, config, heartbeat_s=heartbeat_s, mode=mode, dashboard_url=dashboard)
    if finish_at_exit:
        _at_exit.add(run)
    return run


def _redis_publisher():
    """The Redis transport's Publisher class; a clear error where the `redis` package is not installed."""
    try:
        from observatory.streams import Publisher
    except ModuleNotFoundError as e:
        if e.name != "redis":
            raise
        raise ModuleNotFoundError("Redis mode needs the redis package: pip install 'observatory[redis]' "
                                  "(or stream over HTTP: url='https://your-site', token=...)", name="redis") from e
    return Publisher


class _AtExit:
    """Finishes runs the script left open when the interpreter exits; `failed` if an exception killed it."""

    def __init__(self):
        self.runs: weakref.WeakSet = weakref.WeakSet()
        self.crash: BaseException | None = None
        self._lock = threading.Lock()
        self._installed = False

    def add(self, run: Run) -> None:
        with self._lock:
            if not self._installed:
                self._installed = True
                previous = sys.excepthook

                def hook(exc_type, exc, tb):
                    self.crash = exc
                    previous(exc_type, exc, tb)

                sys.excepthook = hook  # runs before atexit handlers for an uncaught exception
                atexit.register(self.finish_all)
            self.runs.add(run)

    def finish_all(self) -> None:
        detail = f"{type(self.crash).__name__}: {self.crash}" if self.crash is not None else ""
        for run in list(self.runs):
            run.finish(failed=self.crash is not None, detail=detail)


_at_exit = _AtExit()
