"""RunConsumer: one browser watching one run. Checks the viewer may see runs, registers with this process's hub
(webapp.live.hub: one subscription per run, frames encoded once per variant), answers resume with a backfill from
the database, and enforces the protocol's limits. Frames are described in webapp.live.protocol."""

from __future__ import annotations

import asyncio
import logging
import time

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from redis.exceptions import RedisError

from webapp.accounts.permissions import can
from webapp.live import protocol, stats
from webapp.live.backfill import backfill, run_summary, with_unstored
from webapp.live.coalesce import Coalescer
from webapp.live.hub import Outbox, get_hub
from webapp.live.livelog import decode_entry, log_key, seq_of

log = logging.getLogger("observatory.live")
SUMMARY_TTL_S = 1.0  # a thousand viewers arriving at once read the run's summary once, not a thousand times
STALE_OK_S = 30.0  # an older summary still answers while a fresh one is read (updates carry the newest anyway)
RESUME_WAIT_S = 1.0  # live frames wait this long at most for a new socket's first resume
# The log's newest entries a backfill adds (ingest appends a batch's points, one entry, just before its SQL write)
UNSTORED_TAIL, UNSTORED_S = 8, 10.0
_summaries: dict[str, tuple[float, dict | None]] = {}
_backfills: dict[int, Coalescer] = {}  # per event loop: single-flight database reads


async def _allowed(user) -> bool:
    if not user.is_authenticated:  # no database read for the anonymous public (the crowd)
        return can(user, "runs.view")
    return await database_sync_to_async(can)(user, "runs.view")


async def _backfill_text(run_id: str, after: dict[str, int], after_event: int | None) -> str:
    """The encoded backfill frame; identical resumes arriving together share one read and one encoding."""
    co = _coalescer()

    async def read() -> str:
        # the log's tail first: an entry appended after this read is the socket's as a live frame (it joined the
        # hub's reader before), one appended before it whose points were not committed yet comes from here
        tail = await _unstored_tail(run_id)
        body = await database_sync_to_async(backfill)(run_id, after, after_event)
        return protocol.encode({"type": "backfill", "run_id": run_id, **with_unstored(body, after, tail, after_event)})
    return await co.get((run_id, tuple(sorted(after.items())), after_event), read)


async def _unstored_tail(run_id: str) -> list[dict]:
    """The update frames of the live log's newest entries (at most UNSTORED_TAIL, appended in the last
    UNSTORED_S), oldest first: points ingest may have appended but not committed yet."""
    entries = await get_hub().redis.xrevrange(log_key(run_id), count=UNSTORED_TAIL)
    out, floor = [], time.time() - UNSTORED_S
    for entry_id, fields in reversed(entries):
        t = fields.get(b"t")
        if t is not None and int(t) / 1000 >= floor:  # (older entries are not decoded)
            out += [f for f in decode_entry(run_id, entry_id, fields)[2] if f.get("type") == "update"]
    return out


def _after_seq(scope) -> int | None:
    """?after_seq=<n> of the socket's URL (live.js's reconnect), or None (absent or not a number >= 0)."""
    for part in scope.get("query_string", b"").decode("latin-1").split("&"):
        key, _, value = part.partition("=")
        if key == "after_seq" and value.isdigit() and len(value) < 20:
            return int(value)
    return None


async def _log_text(run_id: str, after_seq: int) -> str:
    """The live log's entries after `after_seq` as one batch, the frames as the hub sends them; a "gap" frame (with
    the log's last number) instead when some are no longer kept or more than RESUME_MAX_ENTRIES would come: the
    page refetches the window over HTTP. A resume is never megabytes."""
    r = get_hub().redis
    entries = await r.xrange(log_key(run_id), f"{after_seq + 1}-0", "+", count=protocol.RESUME_MAX_ENTRIES + 1)
    if entries and (seq_of(entries[0][0]) != after_seq + 1 or len(entries) > protocol.RESUME_MAX_ENTRIES):
        last = await r.xrevrange(log_key(run_id), count=1)
        return protocol.encode({"type": "gap", "run_id": run_id, "seq": seq_of(last[0][0])})
    frames = []
    for entry_id, fields in entries:
        for f in decode_entry(run_id, entry_id, fields)[2]:
            f.pop("t", None)
            frames.append(f)
    return protocol.encode(frames)


async def _summary(run_id: str) -> dict | None:
    """The run's summary for "hello": read once per SUMMARY_TTL_S per process, and meanwhile served from memory
    (a crowd arriving together must not queue a database read each behind the backfills)."""
    now = time.monotonic()
    hit = _summaries.get(run_id)
    if hit is not None and now - hit[0] < SUMMARY_TTL_S:
        return hit[1]

    async def read():
        summary = await database_sync_to_async(run_summary)(run_id)
        if len(_summaries) > 1000:
            _summaries.clear()
        _summaries[run_id] = (time.monotonic(), summary)
        return summary
    co, key = _coalescer(), ("summary", run_id)
    if hit is not None and hit[1] is not None and now - hit[0] < STALE_OK_S:
        if key not in co.running:  # refresh in the background, answer with what we have
            asyncio.ensure_future(co.get(key, read))
        return hit[1]
    return await co.get(key, read)


def _coalescer() -> Coalescer:
    loop = asyncio.get_running_loop()
    co = _backfills.get(id(loop))
    if co is None:
        _backfills.clear()
        co = _backfills[id(loop)] = Coalescer()
    return co


class RunConsumer(AsyncWebsocketConsumer):
    # No per-socket channel-layer inbox: the hub holds the run's one subscription for the whole process.
    channel_layer_alias = "observatory.live.no-per-socket-channel"

    closed = False  # set by our first close: frames still arriving are dropped, and no second close is sent

    async def close(self, code=None, reason=None):
        if self.closed:  # a second websocket.close is an ASGI error (uvicorn logs a RuntimeError)
            return
        self.closed = True
        await super().close(code=code, reason=reason)

    async def connect(self):
        self.run_id = self.scope["url_route"]["kwargs"]["run_id"]
        self.feed = self.box = self.release_timer = None
        self.bucket = protocol.TokenBucket()
        await self.accept()  # accept first: a custom close code needs an open socket
        user = self.scope.get("user")
        if user is None or not await _allowed(user):
            return await self.close(code=protocol.CLOSE_FORBIDDEN, reason="not allowed to view runs")
        run = await _summary(self.run_id)
        if run is None:
            return await self.close(code=protocol.CLOSE_UNKNOWN_RUN, reason="unknown run")
        self.box = Outbox(self.base_send, self._close_soon)
        self.box.hold = True  # hello goes first
        try:
            self.feed = await get_hub().join(self.run_id, self.box)
        except Exception as e:  # Redis unreachable: a clean close the browser retries, never an HTTP 500
            log.warning("live: cannot subscribe to run %s: %s", self.run_id, e)
            self.box.stop()
            self.box = None
            return await self.close(code=protocol.CLOSE_TRY_AGAIN, reason="live updates unavailable, retry later")
        await self._send({"type": "hello", "run": run, "limits": protocol.LIMITS})
        after_seq = _after_seq(self.scope)
        if after_seq is not None:  # a reconnect: the log's entries since its last one first (live ones wait)
            await self.send(text_data=await _log_text(self.run_id, after_seq))
            self.box.release()
        else:  # live frames wait for the client's first resume (its backfill first), or RESUME_WAIT_S at most: a
            # live frame first would make a client that resumes by step drop the backfill's older points
            box = self.box
            self.release_timer = asyncio.get_running_loop().call_later(RESUME_WAIT_S, box.release)

    async def disconnect(self, code):
        if self.release_timer is not None:
            self.release_timer.cancel()
        if self.feed is not None:
            get_hub().leave(self.feed, self.box)
            self.feed = None
        elif self.box is not None:
            self.box.stop()

    def _close_soon(self, code: int, reason: str) -> None:
        """From the hub (sync): this socket fell too far behind, or the run's stream had a hole."""
        stats.count("closed_slow" if code == protocol.CLOSE_TOO_SLOW else "resyncs")
        if self.feed is not None:
            get_hub().leave(self.feed, self.box)
            self.feed = None
        asyncio.get_running_loop().create_task(self.close(code=code, reason=reason))

    async def receive(self, text_data=None, bytes_data=None):
        if self.closed:
            return
        if not self.bucket.take():
            stats.count("closed_rate")
            return await self.close(code=protocol.CLOSE_RATE,
                                    reason=f"more than {protocol.RATE_PER_S:g} messages per second")
        if text_data is None:
            return await self._error("binary frames are not supported")
        try:
            msg = protocol.parse_frame(text_data)
        except protocol.ProtocolError as e:
            return await self._error(str(e))
        if msg["type"] == "ping":
            return await self._send({"type": "pong"})
        if msg["type"] != "resume":
            return await self._error(f"unknown message type {msg['type'][:40]!r}")
        if self.feed is None:
            return
        try:
            after, after_event = protocol.parse_resume(msg)
        except protocol.ProtocolError as e:
            return await self._error(str(e))
        if self.release_timer is not None:  # the first resume: its answer releases the live frames
            self.release_timer.cancel()
            self.release_timer = None
        if msg.get("after_seq") is not None:  # the live log's entries after this number (or a gap)
            self.box.hold = True
            try:
                await self.send(text_data=await _log_text(self.run_id, msg["after_seq"]))
            finally:
                self.box.release()
            if not after:
                return
        if after:  # a resume naming no series (events only) leaves the subscription as it was
            names = frozenset(after) | (self.box.sub or frozenset())
            self.box.sub = get_hub().key(self.feed, names)
        # Live frames wait until the backfill is out: an update first would make the client drop the backfill's
        # older points as duplicates (it keeps only steps after the last one it holds).
        self.box.hold = True
        try:
            await self.send(text_data=await _backfill_text(self.run_id, after, after_event))
        except RedisError as e:  # Redis away (the log's tail): a clean close the client retries, never a 500
            log.warning("live: cannot answer a resume for run %s: %s", self.run_id, e)
            return await self.close(code=protocol.CLOSE_TRY_AGAIN, reason="live updates unavailable, retry later")
        finally:
            self.box.release()

    async def _send(self, msg: dict):
        await self.send(text_data=protocol.encode(msg))

    async def _error(self, text: str):
        await self._send({"type": "error", "error": text})
