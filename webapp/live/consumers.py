"""RunConsumer: one browser watching one run. Joins the run's group, answers resume with a backfill from the
database, then relays coalesced updates from ingest. Frames are described in webapp.live.protocol."""

from __future__ import annotations

import json

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer

from observatory import contract
from webapp.live import protocol
from webapp.metrics.models import Series
from webapp.metrics.queries import tail
from webapp.runs.models import Run, RunEvent


@database_sync_to_async
def _run_summary(run_id: str) -> dict | None:
    run = Run.objects.filter(pk=run_id).first()
    return run.summary() if run else None


@database_sync_to_async
def _backfill(run_id: str, after: dict[str, int], after_event: int | None) -> dict:
    events, rewinds = [], []
    if after_event is not None:
        for ev in RunEvent.objects.filter(run_id=run_id, id__gt=after_event).order_by("id")[:1000]:
            events.append(ev.as_dict())
            if ev.kind == RunEvent.KIND_REWIND:
                rewinds.append({"from_step": ev.payload.get("from_step"), "to_step": ev.payload.get("to_step")})
    # a rewind the client missed invalidates what it holds after to_step: re-send from there
    floor = min((rw["to_step"] for rw in rewinds if isinstance(rw.get("to_step"), int)), default=None)
    sids = dict(Series.objects.filter(run_id=run_id, name__in=list(after)).values_list("name", "id"))
    series, truncated = {}, []
    for name, sid in sids.items():
        start = after[name] if floor is None else min(after[name], floor)
        rows, more = tail(sid, start, protocol.BACKFILL_LIMIT)
        series[name] = protocol.series_json(rows)
        if more:
            truncated.append(name)
    return {"series": series, "rewinds": rewinds, "events": events, "truncated": truncated}


class RunConsumer(AsyncWebsocketConsumer):
    async def connect(self):
        self.run_id = self.scope["url_route"]["kwargs"]["run_id"]
        self.group = None
        self.metrics: set[str] | None = None  # None: every series (until the client sends a resume)
        run = await _run_summary(self.run_id)
        await self.accept()  # accept first: a custom close code needs an open socket
        if run is None:
            await self.close(code=protocol.CLOSE_UNKNOWN_RUN)
            return
        self.group = contract.live_group(self.run_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self._send({"type": "hello", "run": run})

    async def disconnect(self, code):
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive(self, text_data=None, bytes_data=None):
        if text_data is None:
            return await self._error("binary frames are not supported")
        if len(text_data) > protocol.MAX_FRAME_BYTES:
            return await self._error(f"frame larger than {protocol.MAX_FRAME_BYTES} bytes")
        try:
            msg = json.loads(text_data)
        except ValueError:
            return await self._error("frame is not JSON")
        if not isinstance(msg, dict) or not isinstance(msg.get("type"), str):
            return await self._error("frame must be an object with a string 'type'")
        if msg["type"] == "ping":
            return await self._send({"type": "pong"})
        if msg["type"] != "resume":
            return await self._error(f"unknown message type {msg['type'][:40]!r}")
        if self.group is None:
            return
        try:
            after, after_event = protocol.parse_resume(msg)
        except protocol.ProtocolError as e:
            return await self._error(str(e))
        if after:  # a resume naming no series (events only) leaves the subscription as it was
            self.metrics = (self.metrics or set()) | set(after)
        body = await _backfill(self.run_id, after, after_event)
        await self._send({"type": "backfill", "run_id": self.run_id, **body})

    async def live_update(self, event):
        """A coalesced delta from ingest (webapp.live.push)."""
        payload = event["payload"]
        if self.metrics is not None and payload.get("series"):
            payload = {**payload, "series": {k: v for k, v in payload["series"].items() if k in self.metrics}}
        await self._send({"type": "update", "run_id": self.run_id, **payload})

    async def _send(self, msg: dict):
        await self.send(text_data=json.dumps(msg, separators=(",", ":"), allow_nan=False))

    async def _error(self, text: str):
        await self._send({"type": "error", "error": text})
