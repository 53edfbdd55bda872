"""Server-side live push: what ingest changed (metrics' RunChanges), coalesced to <= 1 group message per run per
interval, sent to the run's Channels group as an "update" frame body (webapp.live.protocol).

Ingest pushes through LivePublisher, which owns one event loop thread and therefore one Redis pub/sub connection,
instead of spinning a loop per send; a one-off push (a Celery task) uses push_now.

Every group message carries this process's publisher id and a per-run sequence number, so that a web process
(webapp.live.hub) notices an update lost on the way (pub/sub drops messages across a Redis reconnect) and has its
sockets resume, and the time it was sent (push-delay metrics). Bodies are encoded once per process there.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import Future

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings

from observatory import contract
from observatory.streams import nchan
from webapp.live.protocol import encode, update_body
from webapp.metrics.changes import RunChanges

log = logging.getLogger("observatory.live")
MESSAGE_TYPE = "live.update"  # handled by RunConsumer.live_update


class LivePublisher:
    """group_send from sync code through one private event loop thread."""

    def __init__(self):
        self.layer = get_channel_layer()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="live-publisher", daemon=True)
        self.thread.start()
        self.inflight: set[Future] = set()
        self.summaries: dict[str, float] = {}  # run id -> when the push tier last got a summary-only frame

    def send(self, run_id: str, *payloads: dict) -> None:
        """Bodies for one run, in order, in ONE group message: a web process queues them together and its next
        batch carries them all (points and the anomaly frame about them: one browser message, one redraw)."""
        for payload in payloads:
            to_push_tier(run_id, payload, self.summaries)
        if self.layer is None or not payloads:
            return
        fut = asyncio.run_coroutine_threadsafe(self.layer.group_send(*_group_message(run_id, *payloads, ordered=True)),
                                               self.loop)
        self.inflight.add(fut)
        fut.add_done_callback(self._done)

    def _done(self, fut: Future) -> None:
        self.inflight.discard(fut)
        if fut.exception() is not None:
            log.warning("live push failed: %s", fut.exception())

    def close(self, timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        for fut in list(self.inflight):
            try:
                fut.result(max(0.0, deadline - time.monotonic()))
            except Exception:
                pass
        if self.layer is not None and hasattr(self.layer, "flush"):
            try:
                asyncio.run_coroutine_threadsafe(self.layer.flush(), self.loop).result(
                    max(0.1, deadline - time.monotonic()))
            except Exception:
                pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout)
        if not self.thread.is_alive():
            # close now, here: channels_redis hooks loop.close() to flush its layer, which breaks if the loop is
            # instead garbage-collected later while some other event loop is running in the collecting thread
            self.loop.close()


class LiveBuffer:
    """Coalesces changes per run; flush_due() pushes each run at most once per `interval` seconds."""

    def __init__(self, send, interval: float = 0.1):
        self.send = send  # callable(run_id, *payloads)
        self.interval = interval
        self.pending: dict[str, RunChanges] = {}
        self.last_push: dict[str, float] = {}
        self.pushes = 0

    def add(self, changes: dict[str, RunChanges]) -> None:
        """One committed batch's changes, {run id: RunChanges} (an Ingestor's on_changes)."""
        for run_id, ch in changes.items():
            if not ch:
                continue
            if run_id in self.pending:
                self.pending[run_id].merge(ch)
            else:
                self.pending[run_id] = ch

    def next_due_in(self, now: float | None = None) -> float | None:
        if not self.pending:
            return None
        now = time.monotonic() if now is None else now
        return max(0.0, min(self.last_push.get(r, -1e9) + self.interval - now for r in self.pending))

    def flush_due(self, now: float | None = None, force: bool = False) -> int:
        now = time.monotonic() if now is None else now
        due = [r for r in self.pending if force or now - self.last_push.get(r, -1e9) >= self.interval]
        return self.flush_runs(due, now)

    def flush_runs(self, run_ids, now: float | None = None) -> int:
        """Push these runs' pending changes now, whatever the interval."""
        return sum(self.flush_with(run_id, (), now) for run_id in run_ids)

    def flush_with(self, run_id: str, frames: Sequence[dict], now: float | None = None) -> bool:
        """The run's pending changes now, whatever the interval, and feature frames about them after them in the same
        message (the frames alone when nothing is pending); whether changes were pushed."""
        changes = self.pending.pop(run_id, None)
        if changes is None:
            if frames:
                self.send(run_id, *frames)
            return False
        self.last_push[run_id] = time.monotonic() if now is None else now
        self.send(run_id, update_body(changes), *frames)
        self.pushes += 1
        return True


def push_now(run_id: str, changes: RunChanges) -> None:
    """One-off push from sync code that is not ingest (e.g. a Celery task noticing a dead run)."""
    to_push_tier(run_id, update_body(changes))
    layer = get_channel_layer()
    if layer is not None:
        async_to_sync(layer.group_send)(*_group_message(run_id, update_body(changes)))


def send_frame(run_id: str, frame: dict) -> None:
    """A feature frame (its "type" names it) from sync code of an app before live in the chain, through the
    runs.extensions sender slot (annotations). A failure is logged: the write stands, viewers see it on reload."""
    to_push_tier(run_id, frame)
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(*_group_message(run_id, frame))
    except Exception as e:
        log.warning("live push of a %s frame to %s failed: %s", frame.get("type"), run_id, e)


SUMMARY_EVERY_S = 1.0  # a frame that carries only the run's summary (ingest has one per batch) goes this often


def push_tier_frame(run_id: str, body: dict, summaries: dict[str, float] | None = None) -> dict | None:
    """What the push tier gets of a frame body sent to the hub: a feature frame as it is; of an update, only what
    the relay (webapp.live.relay) cannot know from the stream: events (with their ids), the run's summary, new
    series. Never its points or rewinds: the relay sent those already, and a late rewind would cut newer points."""
    frame = {k: v for k, v in body.items() if k != "t"}
    if "type" in frame:
        return frame
    out = {"type": "update", "run_id": run_id}
    out.update({k: frame[k] for k in ("events", "run", "new_series") if frame.get(k)})
    if "events" not in out and "new_series" not in out:
        if "run" not in out or summaries is None:
            return out if "run" in out else None
        now = time.monotonic()
        if now - summaries.get(run_id, float("-inf")) < SUMMARY_EVERY_S:
            return None
        summaries[run_id] = now
    return out


def to_push_tier(run_id: str, body: dict, summaries: dict[str, float] | None = None) -> None:
    """Publish push_tier_frame(...) to the run's nchan channel when there is a push tier (OBS_LIVE_PUSH_URL). A
    failure is logged: the hub and the HTTP API still carry it."""
    url = settings.OBS_LIVE_PUSH_URL
    frame = push_tier_frame(run_id, body, summaries) if url else None
    if frame is None:
        return
    try:
        nchan.shared(url).publish_all(run_id, encode(frame))
    except nchan.PushError as e:
        log.warning("push tier: frame for run %s lost: %s", run_id, e)


_SRC = uuid.uuid4().hex[:12]  # this process, as a publisher
_seq: defaultdict[str, itertools.count] = defaultdict(lambda: itertools.count(1))
_seq_lock = threading.Lock()


def _group_message(run_id: str, body: dict, *more: dict, ordered: bool = False) -> tuple[str, dict]:
    """(group, message) for the run's watchers; each web process's hub (webapp.live.hub) receives the message:
    "payload" the body, "more" the bodies that follow it (queued with it, never a send apart).
    ordered: sent by the ingest that owns the run's stream (LivePublisher), whose messages carry the run's data in
    order; a hub that sees a new ordered publisher knows the run changed hands (webapp.live.hub.Feed.receive)."""
    with _seq_lock:
        seq = next(_seq[run_id])
    msg = {"type": MESSAGE_TYPE, "run_id": run_id, "payload": body, "src": _SRC, "seq": seq, "sent": time.time()}
    if more:
        msg["more"] = list(more)
    if ordered:
        msg["ordered"] = True
    return contract.live_group(run_id), msg
