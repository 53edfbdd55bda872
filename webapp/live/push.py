"""Server-side live push: per-run deltas coalesced to <= 1 group message per run per interval.

Sync processes (ingest, Celery) push through LivePublisher, which owns one event loop thread and therefore one
Redis pub/sub connection, instead of spinning a loop per send.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from concurrent.futures import Future

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from observatory import contract
from webapp.live.protocol import series_json

log = logging.getLogger("observatory.live")
MESSAGE_TYPE = "live.update"  # handled by RunConsumer.live_update


class LiveDelta:
    """What changed in one run since the last push, in a form that merges in order."""

    def __init__(self):
        self.points: dict[str, dict[int, tuple[float | None, int]]] = {}
        self.rewinds: list[dict] = []
        self.events: list[dict] = []
        self.run: dict | None = None
        self.new_series: set[str] = set()

    def __bool__(self):
        return bool(self.points or self.rewinds or self.events or self.run or self.new_series)

    def add_point(self, name: str, step: int, value: float | None, special: int) -> None:
        self.points.setdefault(name, {})[step] = (value, special)

    def rewind(self, from_step: int, to_step: int) -> None:
        for pts in self.points.values():
            for step in [s for s in pts if s > to_step]:
                del pts[step]
        self.rewinds.append({"from_step": from_step, "to_step": to_step})

    def merge(self, later: "LiveDelta") -> None:
        for rw in later.rewinds:
            self.rewind(rw["from_step"], rw["to_step"])
        for name, pts in later.points.items():
            self.points.setdefault(name, {}).update(pts)
        self.events.extend(later.events)
        self.run = later.run or self.run
        self.new_series |= later.new_series

    def payload(self) -> dict:
        out: dict = {
            "series": {name: series_json((s, *pts[s]) for s in sorted(pts)) for name, pts in self.points.items()
                       if pts},
            "rewinds": self.rewinds,
            "events": self.events,
        }
        if self.run:
            out["run"] = self.run
        if self.new_series:
            out["new_series"] = sorted(self.new_series)
        return out


class LivePublisher:
    """group_send from sync code through one private event loop thread."""

    def __init__(self):
        self.layer = get_channel_layer()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="live-publisher", daemon=True)
        self.thread.start()
        self.inflight: set[Future] = set()
        self.failures = 0

    def send(self, run_id: str, payload: dict) -> None:
        if self.layer is None:
            return
        msg = {"type": MESSAGE_TYPE, "run_id": run_id, "payload": payload}
        fut = asyncio.run_coroutine_threadsafe(self.layer.group_send(contract.live_group(run_id), msg), self.loop)
        self.inflight.add(fut)
        fut.add_done_callback(self._done)

    def _done(self, fut: Future) -> None:
        self.inflight.discard(fut)
        if fut.exception() is not None:
            self.failures += 1
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
    """Coalesces deltas per run; flush_due() pushes each run at most once per `interval` seconds."""

    def __init__(self, send, interval: float = 0.1):
        self.send = send  # callable(run_id, payload)
        self.interval = interval
        self.pending: dict[str, LiveDelta] = {}
        self.last_push: dict[str, float] = {}
        self.pushes = 0

    def add(self, run_id: str, delta: LiveDelta) -> None:
        if not delta:
            return
        if run_id in self.pending:
            self.pending[run_id].merge(delta)
        else:
            self.pending[run_id] = delta

    def next_due_in(self, now: float | None = None) -> float | None:
        if not self.pending:
            return None
        now = time.monotonic() if now is None else now
        return max(0.0, min(self.last_push.get(r, -1e9) + self.interval - now for r in self.pending))

    def flush_due(self, now: float | None = None, force: bool = False) -> int:
        now = time.monotonic() if now is None else now
        sent = 0
        for run_id in list(self.pending):
            if force or now - self.last_push.get(run_id, -1e9) >= self.interval:
                delta = self.pending.pop(run_id)
                self.last_push[run_id] = now
                self.send(run_id, delta.payload())
                sent += 1
        self.pushes += sent
        return sent


def push_now(run_id: str, payload: dict) -> None:
    """One-off push from sync code that is not ingest (e.g. a Celery task noticing a dead run)."""
    layer = get_channel_layer()
    if layer is not None:
        async_to_sync(layer.group_send)(contract.live_group(run_id),
                                        {"type": MESSAGE_TYPE, "run_id": run_id, "payload": payload})
