"""The client's HTTP transport: the Publisher's queue and writer thread, posting batches to the site's intake.

For training loops that cannot reach the lab's Redis: messages go to `POST /api/runs/<id>/telemetry/` with a
per-user write token (see `observatory.contract.intake`). Requests are split to the intake's limits; refusals
that a retry cannot fix (400, 401, 403, 404, 413) drop that request's messages and count them as `rejected`;
anything else (429, 5xx, a network error) is retried with capped backoff, the backlog kept in the bounded queue.
"""

from __future__ import annotations

import json
import logging
import os
import urllib.error
import urllib.request

from observatory import contract
from observatory.streams.queued import QueuedPublisher

log = logging.getLogger(__name__)

_PERMANENT = frozenset({400, 401, 403, 404, 405, 413})
_OVERHEAD = 16  # '{"messages":[' + ']}', and a comma per message (counted below)


class HttpPublisher(QueuedPublisher):
    """A Publisher whose transport is the site's HTTP intake; `stats()` adds `rejected`."""

    transport = "the site"

    def __init__(self, url: str, token: str, run_id: str, max_queue: int = 20_000,
                 batch: int = contract.INTAKE_MAX_MESSAGES, linger_s: float = 0.25, timeout_s: float = 10.0,
                 max_backoff_s: float = 10.0, max_bytes: int = contract.INTAKE_MAX_BYTES):
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"intake URL must start with http:// or https://, got {url!r}")
        self.endpoint = url.rstrip("/") + contract.intake_path(run_id)
        self._headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json",
                         "User-Agent": f"observatory-client (pid {os.getpid()})"}
        self._timeout = timeout_s
        self._max_bytes = int(max_bytes)
        self._refusals_logged: set[int] = set()
        super().__init__(run_id, max_queue, min(int(batch), contract.INTAKE_MAX_MESSAGES),
                         max_backoff_s=max_backoff_s, linger_s=linger_s)
        self._stats["rejected"] = 0

    def _write(self, items: list) -> None:
        encoded = [self._encode(kind, data) for kind, data in items]
        items[:] = [it for it, f in zip(items, encoded) if f is not None]  # invalid: counted once, gone
        entries = [f for f in encoded if f is not None]
        while entries:
            n, size = 0, _OVERHEAD
            while n < len(entries) and (n == 0 or size + len(entries[n]["data"]) + 32 <= self._max_bytes):
                size += len(entries[n]["data"]) + 32  # {"kind":"heartbeat","data":...},
                n += 1
            self._post(contract.intake_body(entries[:n]), n)
            del entries[:n], items[:n]  # delivered (or refused for good): a later failure retries only the rest

    def _post(self, body: bytes, n: int) -> None:
        req = urllib.request.Request(self.endpoint, data=body, headers=self._headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self._timeout) as resp:
                resp.read()
        except urllib.error.HTTPError as e:
            if e.code not in _PERMANENT:
                raise  # 429, 5xx: retried with backoff
            self._connected_now()
            reason = _error_text(e)
            self._error("rejected", f"HTTP {e.code}: {reason}", n)
            if e.code not in self._refusals_logged:  # once per status: a bad token refuses every batch
                self._refusals_logged.add(e.code)
                log.warning("publisher %s: the site refused %d messages (HTTP %d: %s)", self.run_id, n, e.code,
                            reason)
            return
        self._connected_now()
        self._published(n)


def _error_text(e: urllib.error.HTTPError) -> str:
    try:
        return str(json.loads(e.read() or b"{}").get("error", e.reason))[:200]
    except (ValueError, AttributeError, OSError):
        return str(e.reason)[:200]
