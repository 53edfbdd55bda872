"""A non-blocking Redis publisher for one run's telemetry stream: the training thread only appends to a queue.

A background thread encodes queued messages with `observatory.contract`, XADDs them in pipelined batches
(no transaction, approximate MAXLEN), keeps the run in `contract.RUNS_KEY` and mirrors heartbeats into
`contract.heartbeat_key(run)` with a TTL. When Redis is slow or gone it keeps the queue (bounded; what does not
fit is dropped and counted), reconnects with capped exponential backoff and flushes the backlog in order.
Framework-free: imports neither Django nor JAX.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Any, Mapping

from observatory import contract
from observatory.streams.consumer import connect

log = logging.getLogger(__name__)

# Kinds that describe the run rather than sample it. They get headroom beyond max_queue so that a backlog of
# metrics never pushes out a rewind or a state change (their order relative to metrics matters to the web).
_CONTROL_KINDS = frozenset({"run", "manifest", "state", "event", "rewind"})
_CONTROL_HEADROOM = 1000


class Publisher:
    """`publish`/`metrics` never block and never raise on Redis trouble; `stats()` says what happened."""

    def __init__(self, redis_url: str, run_id: str, max_queue: int = 20_000, batch: int = 100,
                 flush_interval_s: float = 0.05, socket_timeout_s: float = 2.0, max_backoff_s: float = 2.0,
                 heartbeat_ttl_s: int = contract.HEARTBEAT_TTL_S, client_factory=None):
        if not contract.RUN_ID_RE.match(run_id or ""):
            raise ValueError(f"bad run id {run_id!r} (letters, digits, '_.-', at most 64)")
        self.run_id = run_id
        self.stream = contract.telemetry_stream(run_id)
        self.max_queue = int(max_queue)
        self.batch = max(1, int(batch))
        self._flush_interval = flush_interval_s
        self._max_backoff = max_backoff_s
        self._hb_ttl = int(heartbeat_ttl_s)
        self._client_factory = client_factory or (lambda: connect(redis_url, socket_timeout_s,
                                                                  health_check_interval=0))
        self._q: collections.deque = collections.deque()  # (kind, data) in publish order
        self._inflight = 0  # messages taken off the queue and not yet written
        self._cv = threading.Condition()
        self._closing = False
        self._client = None
        self._registered = False  # SADD RUNS_KEY done on this connection
        self._good_names: set[str] = set()  # metric names already checked against the contract
        self._stats = {"published": 0, "dropped": 0, "invalid": 0, "reconnects": 0, "errors": 0,
                       "dropped_by_kind": collections.Counter(), "last_error": ""}
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
            if len(self._q) >= limit:
                self._drop(kind)
                return False
            self._q.append((kind, data))
            if len(self._q) >= self.batch:
                self._cv.notify()
        return True

    def _drop(self, kind: str) -> None:
        self._stats["dropped"] += 1
        self._stats["dropped_by_kind"][kind] += 1

    # ------------------------------------------------------------------------------------------ control
    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until everything queued so far is written. False on timeout (e.g. Redis is down)."""
        deadline = time.monotonic() + timeout
        with self._cv:
            self._cv.notify_all()
            while self._q or self._inflight:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cv.wait(min(left, 0.05))
        return True

    def close(self, timeout: float = 5.0) -> bool:
        """Flush (up to `timeout`), then stop the writer thread. Whatever is still queued is counted as dropped."""
        ok = self.flush(timeout)
        with self._cv:
            self._closing = True
            self._cv.notify_all()
        self._thread.join(timeout=max(0.5, self._max_backoff + 1))
        with self._cv:
            for kind, _ in self._q:
                self._drop(kind)
            self._q.clear()
        if self._client is not None:
            try:
                self._client.close()
            except Exception:
                pass
        return ok

    def stats(self) -> dict:
        with self._cv:
            s = dict(self._stats)
            s["dropped_by_kind"] = dict(self._stats["dropped_by_kind"])
            s["queue_depth"] = len(self._q) + self._inflight
            s["connected"] = self._connected
        return s

    # ------------------------------------------------------------------------------------------ writer thread
    def _take(self) -> list:
        with self._cv:
            if not self._q and not self._closing:
                self._cv.wait(self._flush_interval)
            n = min(self.batch, len(self._q))
            items = [self._q.popleft() for _ in range(n)]
            self._inflight = n
        return items

    def _requeue(self, items: list) -> None:
        with self._cv:
            self._q.extendleft(reversed(items))
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
                written = self._write(items)
            except Exception as e:  # any Redis/socket failure: keep the items, reconnect later
                self._requeue(items)
                with self._cv:
                    self._stats["errors"] += 1
                    self._stats["last_error"] = f"{type(e).__name__}: {e}"[:300]
                    was_connected, self._connected = self._connected, False
                if was_connected:
                    log.warning("publisher %s: Redis unavailable (%s); buffering", self.run_id, e)
                self._reset_client()
                if self._closing:
                    return
                time.sleep(backoff)
                backoff = min(self._max_backoff, backoff * 2)
                continue
            backoff = 0.05
            with self._cv:
                self._inflight = 0
                self._stats["published"] += written
                self._cv.notify_all()

    def _reset_client(self) -> None:
        if self._client is not None:
            try:
                self._client.close()
            except Exception:
                pass
        self._client = None
        self._registered = False

    def _write(self, items: list) -> int:
        if self._client is None:
            self._client = self._client_factory()
            self._client.ping()
            with self._cv:
                if self._stats["errors"]:
                    self._stats["reconnects"] += 1
                self._connected = True
        pipe = self._client.pipeline(transaction=False)
        if not self._registered:
            pipe.sadd(contract.RUNS_KEY, self.run_id)
        n = 0
        for kind, data in items:
            fields = self._encode(kind, data)
            if fields is None:
                continue
            pipe.xadd(self.stream, fields, maxlen=contract.STREAM_MAXLEN, approximate=True)
            if kind == "heartbeat":
                pipe.set(contract.heartbeat_key(self.run_id), fields["data"], ex=self._hb_ttl)
            n += 1
        pipe.execute()
        self._registered = True
        with self._cv:
            self._connected = True
        return n

    def _encode(self, kind: str, data) -> dict | None:
        try:
            if kind == "metrics":
                return self._encode_metrics(data)
            return contract.encode(self.run_id, kind, data)
        except (contract.ContractError, TypeError, ValueError) as e:
            with self._cv:
                self._stats["invalid"] += 1
                self._stats["last_error"] = f"invalid {kind}: {e}"[:300]
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
