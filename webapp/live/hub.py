"""Per-process fan-out: ONE reader of the run's live log (webapp.live.livelog) per watched run, each entry encoded
once per subscription variant and shared (the same str object) by every socket of that variant, sent at most once
per interval. Frames carry the log's sequence number ("seq"), the same the push tier's viewers see.

Why: per-socket group membership and per-socket JSON encoding made the cost of an update grow with the viewers
(bench/fanout.py: 100 viewers 6 s late). Here a run's update costs one decode + one encode per variant in each
process, plus one cheap enqueue per socket; a socket's own task does the write, so a slow reader delays only
itself. Frames that pile up between two sends travel as one batch (protocol.py: "[FRAME, ...]").
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from django.conf import settings

from webapp.live import protocol, stats
from webapp.live.livelog import decode_entry, log_key, seq_of
from webapp.live.protocol import frame_of  # noqa: F401  (re-exported: the hub's frames are the log's)

log = logging.getLogger("observatory.live")

MIN_INTERVAL_S = settings.OBS_LIVE_MIN_INTERVAL_MS / 1000
# Frames per second one process aims to write in all: with more sockets the interval grows, so the frames per
# socket drop (coalesced) instead of the process falling behind. bench/fanout.py measured the ceiling.
FRAME_BUDGET = settings.OBS_LIVE_FRAME_BUDGET
MAX_VARIANTS = 64  # distinct subscriptions per run per process; past it a socket gets every series
LINGER_S = 5.0  # keep a run's subscription this long after its last viewer left (reloads, reconnects)
MAX_PENDING_BYTES = 16 * 2**20
READ_BLOCK_MS = 5000  # one blocking read of a run's log (the client's socket timeout is longer)


class Outbox:
    """One socket's queue of encoded batches and the task that writes them. `send` is the ASGI send callable."""

    def __init__(self, send: Callable, on_overflow: Callable[[int, str], None]):
        self.send = send
        self.on_overflow = on_overflow
        self.items: list[tuple[str, str, int]] = []  # (text, inner, frames): text as sent alone, inner to join
        self.nbytes = 0
        self.hold = False  # a backfill is being answered: live frames wait behind it
        self.sub: frozenset | None = None  # subscribed series (None: every series)
        self.wake = asyncio.Event()
        self.task = asyncio.get_running_loop().create_task(self._run())
        self.closed = False

    def put(self, item: tuple[str, str, int]) -> None:
        if self.closed:
            return
        self.items.append(item)
        self.nbytes += len(item[0])
        if len(self.items) > protocol.MAX_PENDING_FRAMES or self.nbytes > MAX_PENDING_BYTES:
            self.closed = True
            self.items, self.nbytes = [], 0
            self.on_overflow(protocol.CLOSE_TOO_SLOW, "too slow to keep up: reconnect and resume")
            return
        self.wake.set()

    def release(self) -> None:
        self.hold = False
        if self.items:
            self.wake.set()

    async def _run(self) -> None:
        while True:
            await self.wake.wait()
            self.wake.clear()
            if self.hold or not self.items or self.closed:
                continue
            items, self.items, self.nbytes = self.items, [], 0
            if len(items) == 1:
                text, n = items[0][0], items[0][2]
            else:
                text, n = "[" + ",".join(i[1] for i in items) + "]", sum(i[2] for i in items)
            try:
                await self.send({"type": "websocket.send", "text": text})
            except Exception:  # the socket went away mid-write: its consumer's disconnect cleans up
                self.closed = True
                return
            stats.sent(n, len(text))

    def stop(self) -> None:
        self.closed = True
        self.task.cancel()


class Feed:
    """One run in one process: its log reader, its sockets, the updates not yet flushed to them."""

    def __init__(self, hub: Hub, run_id: str):
        self.hub, self.run_id = hub, run_id
        self.key = log_key(run_id)
        self.outboxes: set[Outbox] = set()
        self.queue: list[dict] = []  # decoded frames since the last flush, in order
        self.last_flush = float("-inf")
        self.timer: asyncio.TimerHandle | None = None
        self.last_seq: int | None = None  # the last entry of the log received
        self.cursor = "0-0"
        self.reader: asyncio.Task | None = None
        self.ready: asyncio.Future | None = None
        self.linger: asyncio.TimerHandle | None = None

    async def start(self) -> None:
        """Read the log from its end (sockets that join now resume the rest from the database or the log)."""
        last = await self.hub.redis.xrevrange(self.key, count=1)
        if last:
            self.cursor, self.last_seq = last[0][0], seq_of(last[0][0])
        self.reader = asyncio.get_running_loop().create_task(self._read())

    async def stop(self) -> None:
        if self.timer:
            self.timer.cancel()
        if self.reader:
            self.reader.cancel()

    async def _read(self) -> None:
        failing = 0
        while True:
            try:
                reply = await self.hub.redis.xread({self.key: self.cursor}, count=500, block=READ_BLOCK_MS)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # Redis away: read on from the cursor when it is back (a new log: a hole)
                if not failing:
                    log.warning("live: reading the live log of %s failed: %s; retrying", self.run_id, e)
                failing += 1
                await asyncio.sleep(min(2.0, 0.1 * 2 ** min(failing, 5)))
                continue
            if failing:
                log.info("live: reading the live log of %s again after %d failed reads", self.run_id, failing)
                failing = 0
            for _key, entries in reply or ():
                for entry_id, fields in entries:
                    self.cursor = entry_id
                    try:
                        seq, t, frames = decode_entry(self.run_id, entry_id, fields)
                        self.receive({"seq": seq, "sent": t, "payload": frames[0], "more": frames[1:]})
                    except Exception:
                        log.exception("live: bad live log entry for %s", self.run_id)

    def receive(self, msg: dict) -> None:
        """An entry of the run's live log: check its sequence number, queue its frames, flush when due."""
        seq = msg.get("seq")
        if isinstance(seq, int):
            last, self.last_seq = self.last_seq, seq
            if last is not None and seq != last + 1:  # trimmed before it was read, or the log was re-created
                self.resync(f"missed {seq - last - 1} entries of the live log" if seq > last else "the log restarted")
                return
        payload = dict(msg.get("payload") or {})
        stats.relayed(time.time(), msg.get("sent"), payload.pop("t", None))
        for body in [payload, *(b for b in msg.get("more") or () if isinstance(b, dict))]:
            frame = frame_of(self.run_id, body)
            frame.pop("t", None)
            if isinstance(seq, int):
                frame["seq"] = seq
            self.queue.append(frame)
        self._schedule()

    def _schedule(self) -> None:
        if self.timer is not None:
            return
        delay = self.last_flush + self.hub.interval() - time.monotonic()
        if delay <= 0:
            self.flush()
        else:
            self.timer = asyncio.get_running_loop().call_later(delay, self.flush)

    def flush(self) -> None:
        self.timer = None
        self.last_flush = time.monotonic()
        frames, self.queue = self.queue, []
        if not frames:
            return
        batches: dict = {}
        for box in self.outboxes:
            key = box.sub
            if key not in batches:
                batches[key] = batch(frames, key)
            if batches[key] is not None:
                box.put(batches[key])
        stats.flushed(len(frames), len(batches))

    def resync(self, why: str) -> None:
        """Updates were lost on the way (Redis reconnect): every socket must reconnect and resume, whose
        backfill from the database fills the hole; sending later updates first would hide it."""
        log.warning("live: %s for run %s; %d socket(s) resync", why, self.run_id, len(self.outboxes))
        self.queue = []
        for box in list(self.outboxes):
            box.on_overflow(protocol.CLOSE_RESYNC, why)


def variant(frame: dict, sub: frozenset | None) -> dict | None:
    """The frame as a socket subscribed to `sub` sees it; None when nothing in it concerns that socket."""
    if sub is None or frame.get("type") != "update":
        return frame
    series = {n: s for n, s in frame.get("series", {}).items() if n in sub}
    if not series and not (frame.get("rewinds") or frame.get("events") or frame.get("run")
                           or frame.get("new_series")):
        # nothing for this socket, but a frame of the log's: its number goes (the page's hole check)
        return {"type": "update", "run_id": frame.get("run_id"), "seq": frame["seq"]} if "seq" in frame else None
    return {**frame, "series": series}


def batch(frames: list[dict], sub: frozenset | None) -> tuple[str, str, int] | None:
    """(text to send alone, text to join into a larger batch, frame count) of these frames for one variant."""
    parts = [protocol.encode(f) for f in (variant(f, sub) for f in frames) if f is not None]
    if not parts:
        return None
    inner = ",".join(parts)
    return (parts[0] if len(parts) == 1 else "[" + inner + "]"), inner, len(parts)


class Hub:
    """The process's feeds, by run id. One per event loop (the ASGI server's)."""

    def __init__(self, client=None):
        # The socket timeout is longer than a blocking read: a timeout means a hung Redis, not a quiet run. A read
        # on a pooled connection that a Redis restart closed is retried on a new one (they are all reads).
        self.redis = client or aioredis.from_url(settings.REDIS_URL, socket_connect_timeout=2,
                                                 socket_timeout=READ_BLOCK_MS / 1000 + 5,
                                                 retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), 2))
        self.feeds: dict[str, Feed] = {}
        self.sockets = 0
        self.keys: dict[frozenset, frozenset] = {}  # interned subscription keys

    def interval(self) -> float:
        return max(MIN_INTERVAL_S, self.sockets / FRAME_BUDGET)

    def key(self, feed: Feed, names: frozenset) -> frozenset | None:
        """An interned subscription key, or None (every series) once the run has too many distinct ones."""
        if names in self.keys:
            return self.keys[names]
        if len({b.sub for b in feed.outboxes}) >= MAX_VARIANTS:
            return None
        self.keys[names] = names
        return names

    async def join(self, run_id: str, box: Outbox) -> Feed:
        """Register a socket with its run's feed, subscribing the process to the run first if needed. Raises
        what Redis raises when it is unreachable."""
        feed = self.feeds.get(run_id)
        if feed is None:
            feed = self.feeds[run_id] = Feed(self, run_id)
            feed.ready = asyncio.get_running_loop().create_future()
            try:
                await feed.start()
            except BaseException as e:
                del self.feeds[run_id]
                feed.ready.set_exception(e)
                feed.ready.exception()  # retrieved: joiners waiting on it re-raise it
                await feed.stop()
                raise
            feed.ready.set_result(True)
        else:
            await asyncio.shield(feed.ready)
        if feed.linger:
            feed.linger.cancel()
            feed.linger = None
        feed.outboxes.add(box)
        self.sockets += 1
        stats.clients(self.sockets)
        return feed

    def leave(self, feed: Feed, box: Outbox) -> None:
        box.stop()
        if box in feed.outboxes:
            feed.outboxes.discard(box)
            self.sockets -= 1
            stats.clients(self.sockets)
        if not feed.outboxes and feed.linger is None and self.feeds.get(feed.run_id) is feed:
            feed.linger = asyncio.get_running_loop().call_later(LINGER_S, self._drop, feed)

    def _drop(self, feed: Feed) -> None:
        feed.linger = None
        if not feed.outboxes and self.feeds.get(feed.run_id) is feed:
            del self.feeds[feed.run_id]
            asyncio.get_running_loop().create_task(feed.stop())
        if not self.feeds:
            self.keys.clear()


_hubs: dict[int, Hub] = {}


def get_hub() -> Hub:
    """The hub of the running event loop (an ASGI server has one; tests may run several loops in turn)."""
    loop = asyncio.get_running_loop()
    hub = _hubs.get(id(loop))
    if hub is None or hub.loop is not loop:
        hub = Hub()
        hub.loop = loop
        _hubs.clear()  # a finished loop's hub (tests) cannot be used again
        _hubs[id(loop)] = hub
    return hub
