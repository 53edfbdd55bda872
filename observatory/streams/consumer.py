"""Reading Redis streams through a consumer group: create the group, own pending entries first, parse, back off.

Both ends use this: ingest reads every run's telemetry stream, the trainer reads its control stream. The rules
they share live here once:
- the group is created on first use, and again when a reply says NOGROUP (Redis restarted and lost the stream,
  or someone deleted it), so a reader never stalls on a vanished group;
- a consumer first re-reads its own pending entries (delivered before a crash, never XACKed), then new ones;
- replies come as RESP2 lists or RESP3 dicts depending on the client; `streams_reply` flattens both.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import redis as redis_lib

from observatory import contract


def connect(url: str, timeout: float = 2.0, **kwargs) -> redis_lib.Redis:
    """A client with bounded socket timeouts: nothing in the product may hang forever on a dead Redis."""
    return redis_lib.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=min(1.0, timeout),
                                    **kwargs)


def text(x: Any) -> str:
    return x.decode("utf-8", "replace") if isinstance(x, bytes) else x


def is_nogroup(exc: BaseException) -> bool:
    return isinstance(exc, redis_lib.ResponseError) and "NOGROUP" in str(exc)


def ensure_group(client: redis_lib.Redis, stream: str, group: str, start_id: str = "0") -> bool:
    """Create `group` on `stream` (and the stream) unless it exists. True if it was created now."""
    try:
        client.xgroup_create(stream, group, id=start_id, mkstream=True)
        return True
    except redis_lib.ResponseError as e:
        if "BUSYGROUP" not in str(e):
            raise
        return False


def streams_reply(reply: Any) -> list[tuple[str, list[tuple[str, dict]]]]:
    """An XREAD/XREADGROUP reply (RESP2 list or RESP3 dict) -> [(stream, [(entry id, fields)])].

    Field keys and values stay as the client returned them (bytes by default: decoding is left to the
    validator, which does it once). A pending entry whose body was trimmed away has fields `{}`.
    """
    if not reply:
        return []
    items = reply.items() if isinstance(reply, dict) else reply
    out = []
    for stream, entries in items:
        if entries and isinstance(entries[0], list) and len(entries) == 1 and entries[0] and \
                isinstance(entries[0][0], (list, tuple)):
            entries = entries[0]  # RESP3 wraps the entry list once more
        out.append((text(stream), [(text(eid), fields or {}) for eid, fields in entries]))
    return out


def read_group(client: redis_lib.Redis, group: str, consumer: str, streams: dict[str, str], count: int,
               block_ms: int | None = None) -> list[tuple[str, list[tuple[str, dict]]]]:
    """XREADGROUP over several streams at once ({stream: "0" for own pending | ">" for new})."""
    if not streams:
        return []
    return streams_reply(client.xreadgroup(group, consumer, streams, count=count, block=block_ms))


class StreamConsumer:
    """One consumer of one stream in one group: `read()` returns own pending entries first, then new ones."""

    def __init__(self, client: redis_lib.Redis, stream: str, group: str, consumer: str, *, start_id: str = "0"):
        self.client = client
        self.stream = stream
        self.group = group
        self.consumer = consumer
        self.start_id = start_id
        self._group_ready = False
        self._backlog_done = False

    def read(self, count: int = 100, block_ms: int | None = None) -> list[tuple[str, dict]]:
        """Entries as (entry id, fields); blocks up to `block_ms` only when reading new entries."""
        if not self._group_ready:
            ensure_group(self.client, self.stream, self.group, self.start_id)
            self._group_ready, self._backlog_done = True, False
        try:
            if not self._backlog_done:
                reply = read_group(self.client, self.group, self.consumer, {self.stream: "0"}, count)
                entries = reply[0][1] if reply else []
                if entries:
                    return entries
                self._backlog_done = True
            reply = read_group(self.client, self.group, self.consumer, {self.stream: ">"}, count, block_ms)
        except redis_lib.ResponseError as e:
            if not is_nogroup(e):
                raise
            self._group_ready = False  # the stream vanished (Redis restart, DEL): re-create on the next read
            return []
        return reply[0][1] if reply else []

    def ack(self, *entry_ids: str) -> int:
        return self.client.xack(self.stream, self.group, *entry_ids) if entry_ids else 0

    def reset(self, client: redis_lib.Redis | None = None) -> None:
        """After a reconnect: re-check the group and re-read own pending entries."""
        if client is not None:
            self.client = client
        self._group_ready = self._backlog_done = False


class Backoff:
    """Capped exponential waits between retries; `ok()` resets. `first` is True once per outage (log once)."""

    def __init__(self, start_s: float = 0.1, cap_s: float = 2.0):
        self.start_s, self.cap_s = start_s, cap_s
        self.delay_s = start_s

    @property
    def first(self) -> bool:
        return self.delay_s == self.start_s

    def wait(self, stop: threading.Event | None = None) -> None:
        if stop is not None:
            stop.wait(self.delay_s)
        else:
            threading.Event().wait(self.delay_s)
        self.delay_s = min(self.cap_s, self.delay_s * 2)

    def ok(self) -> None:
        self.delay_s = self.start_s


def newest_metrics_step(client: redis_lib.Redis, run_id: str, scan: int = 5000) -> int | None:
    """The step of the newest `metrics` entry on the run's telemetry stream, scanning back at most `scan`."""
    stream = contract.telemetry_stream(run_id)
    hi, seen = "+", 0
    while seen < scan:
        page = client.xrevrange(stream, max=hi, min="-", count=500)
        if not page:
            return None
        for _eid, fields in page:
            if text(fields.get(b"kind", fields.get("kind"))) == "metrics":
                return int(json.loads(fields.get(b"data", fields.get("data")))["step"])
        seen += len(page)
        hi = "(" + text(page[-1][0])  # exclusive range start (Redis >= 6.2)
    return None
