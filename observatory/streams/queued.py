"""The transport-free part of every telemetry publisher: a bounded queue and a writer thread, standard library only.

`QueuedPublisher` takes queued messages in batches, encodes them with `observatory.contract` (invalid ones are
dropped and counted), and hands them to a subclass's `_write`: Redis (`observatory.streams.Publisher`) or the site's
HTTP intake (`observatory.client.http`). It imports no third-party package, so the client's HTTP mode needs none.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Any, Mapping

from observatory import contract

log = logging.getLogger(__name__)

# Kinds that describe the run rather than sample it. They get headroom beyond max_queue so that a backlog of
# metrics never pushes out a rewind or a state change (their order relative to metrics matters to the web).
_CONTROL_KINDS = frozenset({"run", "manifest", "state", "event", "rewind"})
_CONTROL_HEADROOM = 1000


class QueuedPublisher:
    """`publish`/`metrics` never block and never raise on transport trouble; `stats()` says what happened.

    A subclass sets its own attributes, then calls `__init__` (which starts the writer thread), and implements
    `_write(items)`: deliver the (kind, fields) pairs in order and count them with `_published(n)`, or raise to
    have them retried. A writer that delivers in several parts removes each delivered part from `items` before
    it may raise, so that only the rest is retried.
    """

    def __init__(self, run_id: str, max_queue: int = 20_000, batch: int = 100, flush_interval_s: float = 0.05,
                 max_backoff_s: float = 2.0, linger_s: float = 0.0):
        if not contract.RUN_ID_RE.match(run_id or ""):
            raise ValueError(f"bad run id {run_id!r} (letters, digits, '_.-', at most 64)")
        self.run_id = run_id
        self.max_queue = int(max_queue)
        self.batch = max(1, int(batch))
        self._flush_interval = flush_interval_s
        self._max_backoff = max_backoff_s
        self._linger = linger_s  # wait this long for a fuller batch (a transport with a cost per request)
        self._flushing = 0  # callers waiting in flush(): send what there is now
        self._q: collections.deque = collections.deque()  # (kind, data) in publish order
        self._inflight = 0  # messages taken off the queue and not yet written
        self._retrying = 0  # messages at the head of the queue whose write was attempted and not confirmed
        self._idle = False  # the writer thread waits for work: wake it on the next message
        self._cv = threading.Condition()
        self._closing = False
        self._stopping = threading.Event()
        self._good_names: set[str] = set()  # metric names already checked against the contract
        self._stats = {"published": 0, "dropped": 0, "invalid": 0, "reconnects": 0, "errors": 0, "retried": 0,
                       "resent": 0, "dropped_by_kind": collections.Counter(), "last_error": ""}
        self._connected = False
        self._thread = threading.Thread(target=self._run, name=f"publisher-{run_id}", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------------------------------ producer side
    def publish(self, kind: str, data: Mapping[str, Any]) -> bool:
        """Enqueue one message; `t` is stamped now if absent. Returns False if it had to be dropped."""
        if kind not in contract.KINDS:
            raise ValueError(f"unknown kind {kind!r} (known: {', '.join(contract.KINDS)})")
        if "t" not in data:
            data = {"t": time.time(), **data}
        return self._put(kind, data)

    def metrics(self, step: int, values: Mapping[str, Any]) -> bool:
        """Enqueue one step's metrics. Values are converted to float in the writer thread (NaN kept)."""
        return self._put("metrics", {"t": time.time(), "step": int(step), "values": dict(values)})

    def _put(self, kind: str, data) -> bool:
        with self._cv:
            if self._closing:
                self._drop(kind)
                return False
            limit = self.max_queue + (_CONTROL_HEADROOM if kind in _CONTROL_KINDS else 0)
            # the batch the writer holds counts too: the bound is on everything not yet written, so it does not
            # depend on whether the writer happened to be mid-attempt when the caller published
            if len(self._q) + self._inflight >= limit:
                self._drop(kind)
                return False
            self._q.append((kind, data))
            # an idle writer goes now (no added latency); a busy one takes whatever piled up on its next round
            if self._idle or len(self._q) >= self.batch:
                self._cv.notify()
        return True

    def _drop(self, kind: str) -> None:
        self._stats["dropped"] += 1
        self._stats["dropped_by_kind"][kind] += 1

    # ------------------------------------------------------------------------------------------ control
    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until everything queued so far is written. False on timeout (e.g. the transport is down)."""
        deadline = time.monotonic() + timeout
        with self._cv:
            self._flushing += 1
            self._cv.notify_all()
            try:
                while self._q or self._inflight:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    self._cv.wait(min(left, 0.05))
            finally:
                self._flushing -= 1
        return True

    def close(self, timeout: float = 5.0) -> bool:
        """Flush (up to `timeout`), then stop the writer thread. Whatever is still queued is counted as dropped."""
        ok = self.flush(timeout)
        with self._cv:
            self._closing = True
            self._cv.notify_all()
        self._stopping.set()
        self._thread.join(timeout=max(0.5, self._max_backoff + 1))
        with self._cv:
            for kind, _ in self._q:
                self._drop(kind)
            self._q.clear()
        self._reset()
        return ok

    def stats(self) -> dict:
        with self._cv:
            s = dict(self._stats)
            s["dropped_by_kind"] = dict(self._stats["dropped_by_kind"])
            s["queue_depth"] = len(self._q) + self._inflight
            # written (or being written) and not yet confirmed by the transport: kept, never counted as published
            s["unconfirmed"] = max(self._retrying, self._inflight)
            s["connected"] = self._connected
        return s

    # ------------------------------------------------------------------------------------------ writer thread
    def _take(self) -> list:
        with self._cv:
            if not self._q and not self._closing:
                self._idle = True
                self._cv.wait(self._flush_interval)
                self._idle = False
            linger_until = time.monotonic() + self._linger
            while 0 < len(self._q) < self.batch and not (self._closing or self._flushing):
                left = linger_until - time.monotonic()
                if left <= 0:
                    break
                self._cv.wait(left)
            n = min(self.batch, len(self._q))
            items = [self._q.popleft() for _ in range(n)]
            self._inflight = n
            if self._retrying:
                self._stats["retried"] += min(n, self._retrying)
        return items

    def _requeue(self, items: list) -> None:
        """Put back what a failed write did not confirm, at the head of the queue, counted as unconfirmed."""
        with self._cv:
            self._q.extendleft(reversed(items))
            self._retrying = min(len(self._q), max(self._retrying, len(items)))
            self._inflight = 0
            self._cv.notify_all()

    def _run(self) -> None:
        backoff = 0.05
        while True:
            if self._closing and not self._q:
                return
            items = self._take()
            if not items:
                continue
            try:
                self._write(items)
            except Exception as e:  # any transport failure: keep the items, reconnect later
                self._requeue(items)
                with self._cv:
                    self._stats["errors"] += 1
                    self._stats["last_error"] = f"{type(e).__name__}: {e}"[:300]
                    was_connected, self._connected = self._connected, False
                if was_connected:
                    log.warning("publisher %s: %s unavailable (%s); buffering", self.run_id, self.transport, e)
                self._reset()
                if self._closing:
                    return
                self._stopping.wait(backoff)  # close() cuts the wait short
                backoff = min(self._max_backoff, backoff * 2)
                continue
            backoff = 0.05
            with self._cv:
                self._retrying = max(0, self._retrying - len(items))
                self._inflight = 0
                self._cv.notify_all()

    def _connected_now(self) -> None:
        """Called by a writer when the transport answers; counts a reconnect after errors."""
        with self._cv:
            if not self._connected and self._stats["errors"]:
                self._stats["reconnects"] += 1
            self._connected = True

    def _published(self, n: int) -> None:
        with self._cv:
            self._stats["published"] += n

    def _error(self, key: str, message: str, n: int = 1) -> None:
        with self._cv:
            self._stats[key] = self._stats.get(key, 0) + n
            self._stats["last_error"] = message[:300]

    # ------------------------------------------------------------------------------------------ transport
    transport = "the transport"

    def _write(self, items: list) -> None:
        raise NotImplementedError

    def _reset(self) -> None:
        """Forget the connection after a failure (and at close)."""

    def _encode_all(self, items: list) -> list[dict]:
        return [f for f in (self._encode(kind, data) for kind, data in items) if f is not None]

    def _encode(self, kind: str, data) -> dict | None:
        try:
            if kind == "metrics":
                return self._encode_metrics(data)
            return contract.encode(self.run_id, kind, data)
        except (contract.ContractError, TypeError, ValueError) as e:
            self._error("invalid", f"invalid {kind}: {e}")
            log.warning("publisher %s: dropping invalid %s message: %s", self.run_id, kind, e)
            return None

    def _encode_metrics(self, data) -> dict:
        # The contract's encoder, with names checked once per name rather than once per step (the hot path).
        values = data["values"]
        for name in values:
            if name not in self._good_names:
                if not contract.METRIC_NAME_RE.match(name):
                    raise contract.ContractError("bad_name", repr(name)[:80])
                self._good_names.add(name)
        if len(values) > contract.MAX_METRICS_PER_RECORD:
            raise contract.ContractError("oversized", f"{len(values)} metrics")
        return contract.metrics_fields(self.run_id, data["step"], values, t=data["t"])
