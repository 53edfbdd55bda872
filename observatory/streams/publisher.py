"""A non-blocking publisher for one run's telemetry to Redis: the training thread only appends to a bounded queue
(queued.py). Batching, caps, retries and what is never forgotten: docs/CLIENT.md "The publisher underneath".
"""

from __future__ import annotations

import collections
import logging
import time
from typing import Iterable, Mapping

import redis as redis_lib
from redis.backoff import NoBackoff
from redis.retry import Retry

from observatory import contract
from observatory.streams.consumer import connect, text
from observatory.streams.queued import QueuedPublisher
from observatory.streams.trim import loss_event, trim_telemetry

log = logging.getLogger(__name__)


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
