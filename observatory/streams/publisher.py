"""A non-blocking publisher for one run's telemetry: the training thread only appends to a bounded queue.

`QueuedPublisher` is the transport-free part: a background thread takes queued messages in batches, encodes them
with `observatory.contract` (invalid ones are dropped and counted), and hands them to `_write`. When the
transport is slow or gone it keeps the queue (bounded; what does not fit is dropped and counted), retries with
capped exponential backoff and flushes the backlog in order. `Publisher` writes to Redis: pipelined XADD batches
(no transaction, no MAXLEN), the run kept in `contract.RUNS_KEY`, heartbeats mirrored into
`contract.heartbeat_key(run)` with a TTL — `add_telemetry`, which the web's HTTP intake uses too. Every
`trim_every_s` it applies the stream's caps (`observatory.streams.trim`: only what ingest acknowledged is trimmed,
unread losses are counted); the entries its queue dropped are counted in Redis with its next write.

Nothing Redis has not confirmed is forgotten: a batch whose pipeline did not return stays queued and is counted in
`stats()["unconfirmed"]` until a retry is confirmed; before that retry the stream is checked, so a batch Redis did
apply before the connection broke is not written twice. Confirmed entries are also kept for `retain_s` seconds:
when Redis comes back without some of them (a restart that lost its latest writes) they are written again and
counted in `stats()["resent"]`. Framework-free: imports neither Django nor JAX.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Any, Iterable, Mapping

import redis as redis_lib
from redis.backoff import NoBackoff
from redis.retry import Retry

from observatory import contract
from observatory.streams.consumer import connect, text
from observatory.streams.trim import loss_event, trim_telemetry

log = logging.getLogger(__name__)

# Kinds that describe the run rather than sample it. They get headroom beyond max_queue so that a backlog of
# metrics never pushes out a rewind or a state change (their order relative to metrics matters to the web).
_CONTROL_KINDS = frozenset({"run", "manifest", "state", "event", "rewind"})
_CONTROL_HEADROOM = 1000


def add_telemetry(pipe, run_id: str, entries: Iterable[Mapping[str, str]], *,
                  heartbeat_ttl_s: int = contract.HEARTBEAT_TTL_S, register: bool = True) -> int:
    """Queue on a Redis pipeline what every producer writes for encoded telemetry entries: SADD the run to
    RUNS_KEY (unless `register` is False), XADD each entry, and SET the heartbeat key with a TTL for each heartbeat.
    The caller executes the pipeline, and applies the stream's caps now and then (observatory.streams.trim).
    Returns the number of entries."""
    if register:
        pipe.sadd(contract.RUNS_KEY, run_id)
    stream, n = contract.telemetry_stream(run_id), 0
    for fields in entries:
        pipe.xadd(stream, fields)
        if fields["kind"] == "heartbeat":
            pipe.set(contract.heartbeat_key(run_id), fields["data"], ex=heartbeat_ttl_s)
        n += 1
    return n


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


def _entry_id(raw) -> tuple[int, int]:
    ms, _, seq = text(raw).partition("-")
    return int(ms), int(seq or 0)


class Publisher(QueuedPublisher):
    """Writes one run's telemetry stream to Redis. `retain_s`: how long confirmed entries are kept for
    re-sending after a Redis restart that lost them (Redis with `appendfsync everysec` may lose about the last
    second on a machine crash); `retain_max` bounds how many. `cap`, `hard_cap`, `trim_every_s`: the stream's caps
    and how often they are applied (default: contract.STREAM_MAXLEN, STREAM_HARD_MAXLEN, TRIM_EVERY_S)."""

    transport = "Redis"

    def __init__(self, redis_url: str, run_id: str, max_queue: int = 20_000, batch: int = 100,
                 flush_interval_s: float = 0.05, socket_timeout_s: float = 2.0, max_backoff_s: float = 2.0,
                 heartbeat_ttl_s: int = contract.HEARTBEAT_TTL_S, client_factory=None, retain_s: float = 3.0,
                 retain_max: int = 5000, cap: int | None = None, hard_cap: int | None = None,
                 trim_every_s: float | None = None):
        self.stream = contract.telemetry_stream(run_id)
        self._cap = contract.STREAM_MAXLEN if cap is None else int(cap)
        self._hard_cap = contract.STREAM_HARD_MAXLEN if hard_cap is None else int(hard_cap)
        if not 0 < self._cap <= self._hard_cap:
            raise ValueError(f"stream caps must be 0 < cap <= hard_cap (got {self._cap}, {self._hard_cap})")
        self._trim_every = contract.TRIM_EVERY_S if trim_every_s is None else float(trim_every_s)
        self._next_trim = 0.0  # monotonic time of the next cap check
        self._reported_drops = 0  # drops already counted in contract.telemetry_lost_key
        self._last_step = 0  # the newest metrics step encoded (for loss announcements)
        self._hb_ttl = int(heartbeat_ttl_s)
        self._client_factory = client_factory or (lambda: connect(
            redis_url, socket_timeout_s, health_check_interval=0, retry=Retry(NoBackoff(), 0),
            redis_connect_func=self._on_connect))
        self._client = None
        self._connects = 0  # connections the current client made
        self._registered = False  # SADD RUNS_KEY done on this connection
        self._retain_s, self._retain_max = float(retain_s), int(retain_max)
        self._recent: collections.deque = collections.deque()  # (monotonic t, entry id, fields), confirmed
        self._last_id: tuple[int, int] | None = None  # our newest confirmed entry
        self._suspect = False  # a write failed: check the stream before the next one
        super().__init__(run_id, max_queue, batch, flush_interval_s, max_backoff_s)

    def _on_connect(self, conn) -> None:
        """redis-py replaces a dead pooled connection silently, even in the middle of `pipe.execute()`; a
        restarted Redis would then go unnoticed. Only a client's first connection may succeed: any later one is
        a failure of the write that triggered it, so the next write reconciles first."""
        conn.on_connect()
        self._connects += 1
        if self._connects > 1:
            conn.disconnect()
            raise redis_lib.ConnectionError("the connection to Redis was lost and re-made")

    def _reset(self) -> None:
        if self._client is not None:
            try:
                self._client.close()
            except Exception:
                pass
        self._client = None
        self._connects = 0
        self._registered = False
        self._suspect = True

    def _write(self, items: list) -> None:
        if self._client is None:
            self._client = self._client_factory()
            self._client.ping()
            self._connected_now()
        entries = self._encode_all(items)
        valid, resend = len(entries), []
        if self._suspect:
            entries, resend = self._reconcile(entries)
        register = not self._registered
        pipe = self._client.pipeline(transaction=False)
        add_telemetry(pipe, self.run_id, entries, heartbeat_ttl_s=self._hb_ttl, register=register)
        drops = self._report_drops(pipe)  # (after the entries: their replies keep their indices)
        replies = pipe.execute()
        self._reported_drops += drops
        self._registered, self._suspect = True, False
        self._connected_now()
        if resend:  # their old ids are gone with the lost suffix; they are remembered under their new ones
            gone = {id(f) for f in resend}
            self._recent = collections.deque(r for r in self._recent if id(r[2]) not in gone)
        self._remember(entries, replies, 1 if register else 0)
        if resend:
            self._error("resent", f"Redis had lost {len(resend)} confirmed entries: written again", len(resend))
            log.warning("publisher %s: Redis had lost %d confirmed entries; written again", self.run_id, len(resend))
        self._published(valid)  # every valid message of the batch is in Redis now (written now, or applied before)
        self._maybe_trim()

    def _report_drops(self, pipe) -> int:
        """Count the drops not yet counted in Redis, and announce them on the stream; returns how many."""
        with self._cv:
            dropped = self._stats["dropped"]
        n = dropped - self._reported_drops
        if n > 0:
            pipe.hincrby(contract.telemetry_lost_key(self.run_id), "dropped", n)
            pipe.xadd(self.stream, loss_event(self.run_id, "dropped", n, dropped, self._last_step,
                                              "the publisher's queue was full (Redis slow or away)"))
        return max(0, n)

    def _encode_metrics(self, data) -> dict:
        fields = super()._encode_metrics(data)
        self._last_step = max(self._last_step, data["step"])
        return fields

    def _maybe_trim(self) -> None:
        """Apply the stream's caps when due. A failure is logged and counted, never retried as a write."""
        now = time.monotonic()
        if now < self._next_trim:
            return
        self._next_trim = now + self._trim_every
        try:
            out = trim_telemetry(self._client, self.run_id, self._cap, self._hard_cap, self._last_step)
        except redis_lib.RedisError as e:
            self._error("trim_errors", f"stream cap check failed: {e}")
            return
        if out["lost"]:
            self._error("trimmed", f"{out['lost']} unread entries trimmed past the stream's hard cap", out["lost"])
            log.error("publisher %s: %d unread entries trimmed from %s (ingest is %d behind)", self.run_id,
                      out["lost"], self.stream, out["length"])

    def _reconcile(self, entries: list[dict]) -> tuple[list[dict], list[dict]]:
        """After a failure: (what to write now, the lost confirmed entries it starts with).

        The stream is append-only and Redis loses only a suffix of it (a restart without the latest writes), so
        a kept entry newer than the stream's last entry was lost. If none was, the unconfirmed batch may still
        have been applied before the connection broke: entries of it found after our last confirmed one are not
        written again."""
        now = time.monotonic()
        while self._recent and now - self._recent[0][0] > self._retain_s:
            self._recent.popleft()
        last = self._client.xrevrange(self.stream, "+", "-", count=1)
        last_id = _entry_id(last[0][0]) if last else None
        lost = [fields for _, eid, fields in self._recent if last_id is None or eid > last_id]
        if lost or not entries:
            return lost + entries, lost
        if self._last_id is not None and (last_id is None or last_id <= self._last_id):
            return entries, []  # nothing after our last confirmed entry: none of the batch was applied
        if self._last_id is not None:
            after = self._client.xrange(self.stream, "(%d-%d" % self._last_id, "+", count=len(entries) + 256)
        else:
            after = self._client.xrevrange(self.stream, "+", "-", count=len(entries) + 256)
        present = {(text(f.get(b"kind", f.get("kind"))), text(f.get(b"data", f.get("data")))) for _, f in after}
        return [f for f in entries if (f["kind"], f["data"]) not in present], []

    def _remember(self, entries: list[dict], replies: list, i: int) -> None:
        """Keep confirmed entries (with the ids Redis gave them: XADD replies from index i) for `retain_s`."""
        now = time.monotonic()
        for fields in entries:
            eid = _entry_id(replies[i])
            self._recent.append((now, eid, fields))
            self._last_id = eid
            i += 2 if fields["kind"] == "heartbeat" else 1
        while self._recent and (len(self._recent) > self._retain_max or now - self._recent[0][0] > self._retain_s):
            self._recent.popleft()
