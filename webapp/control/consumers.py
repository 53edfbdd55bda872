"""The operator panel's WebSocket (/ws/operate/): operators only; pushes the panel's snapshot whenever it changes.

The snapshot is rebuilt from shared state (SQL + Redis) every TICK_S, and at once when an ack or a command lands on
a run's streams (a blocking XREAD on them), never kept in one process's memory: every web replica, and a restarted
one, shows the same command lives, and two operators see each other's commands as they are sent. Sockets of one
process share rebuilds that are less than a tick old. Frames (server -> client):
    {"type": "snapshot", "runs": [...], "commands": [...], "html": {"runs": "<tr>…", "commands": "<tr>…"}}
                                                             on connect and on every change (html: tables.py)
    {"type": "pong"}                                         the answer to {"type": "ping"}
Client -> server: {"type": "ping"}, {"type": "refresh"} (rebuild now, e.g. right after sending a command).
Close code 4403: not an operator, at connect or later: the role is re-read from the database every
settings.OBS_OPERATOR_RECHECK_S, so an operator demoted (role revoked, deactivated, superuser removed) is closed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time

import redis.asyncio as aioredis
from channels.auth import AuthMiddlewareStack
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.contrib.auth import get_user_model
from django.urls import re_path

from observatory import contract
from webapp.accounts.permissions import can
from webapp.control import snapshot, tables

log = logging.getLogger("observatory.control")
TICK_S = 0.5
CLOSE_FORBIDDEN = 4403
MAX_FRAME_CHARS = 4096  # the panel sends {"type": "ping"} and {"type": "refresh"}: anything longer is dropped
_shared = {"t": 0.0, "text": None, "runs": []}  # this process's latest build, reused by its other sockets within a tick
_lock: asyncio.Lock | None = None


@database_sync_to_async
def _allowed(user) -> bool:
    return user is not None and can(user, "run.command")


@database_sync_to_async
def _still_allowed(user_pk) -> bool:
    """The role as the database says now (a fresh user object: roles are cached on the one the socket holds)."""
    user = get_user_model().objects.filter(pk=user_pk).first()
    return user is not None and can(user, "run.command")


async def _build(force: bool) -> str:
    global _lock
    if _lock is None:
        _lock = asyncio.Lock()
    async with _lock:
        if force or _shared["text"] is None or time.monotonic() - _shared["t"] >= TICK_S * 0.8:
            body = await database_sync_to_async(snapshot.build)()
            html = await database_sync_to_async(tables.render)(body)  # the two tables, rendered once for every socket
            _shared["text"] = json.dumps({"type": "snapshot", **body, "html": html}, separators=(",", ":"),
                                         allow_nan=False)
            _shared["t"] = time.monotonic()
            _shared["runs"] = [r["id"] for r in body["runs"]]
        return _shared["text"]


class OperateConsumer(AsyncWebsocketConsumer):
    channel_layer_alias = "observatory.control.no-channel-layer"  # nothing is pushed to it: it polls shared state

    async def connect(self):
        self.task = None
        await self.accept()
        if not await _allowed(self.scope.get("user")):
            await self.close(code=CLOSE_FORBIDDEN)
            return
        self.user_pk = self.scope["user"].pk
        self.recheck_at = time.monotonic() + settings.OBS_OPERATOR_RECHECK_S
        self.wake = asyncio.Event()
        self.task = asyncio.create_task(self._loop())

    async def disconnect(self, code):
        if self.task is not None:
            self.task.cancel()
            try:
                await self.task
            except BaseException:  # cancelled, or it had failed: either way it is over
                pass

    async def receive(self, text_data=None, bytes_data=None):
        try:
            msg = json.loads(text_data or "") if len(text_data or "") <= MAX_FRAME_CHARS else None
        except (ValueError, RecursionError):  # thousands of '[' overflow the decoder's own recursion
            return
        if not isinstance(msg, dict):
            return
        if msg.get("type") == "ping":
            await self.send(text_data='{"type":"pong"}')
        elif msg.get("type") == "refresh" and self.task is not None:
            self.force = True
            self.wake.set()

    async def _loop(self):
        last, self.force = None, True
        r = aioredis.from_url(settings.REDIS_URL)
        cursors: dict[str, str] = {}
        try:
            while True:
                try:
                    if not await self._still_operator():
                        await self.close(code=CLOSE_FORBIDDEN)
                        return
                    text = await _build(self.force)
                except Exception as e:  # Redis or the database away: say nothing new, try again shortly
                    log.warning("operate snapshot failed: %s: %s", type(e).__name__, e)
                    await asyncio.sleep(TICK_S * 4)
                    continue
                self.force = False
                if text != last:
                    await self.send(text_data=text)
                    last = text
                self.wake.clear()
                self.force = await self._changed(r, cursors)
        finally:
            await r.aclose()

    async def _still_operator(self) -> bool:
        """False once the user is no longer an operator; the database is asked every OBS_OPERATOR_RECHECK_S."""
        if time.monotonic() < self.recheck_at:
            return True
        allowed = await _still_allowed(self.user_pk)
        self.recheck_at = time.monotonic() + settings.OBS_OPERATOR_RECHECK_S
        return allowed

    async def _changed(self, r, cursors: dict[str, str]) -> bool:
        """Wait up to a tick for an ack or a command on any listed run (True: rebuild now), or a client refresh."""
        for run_id in _shared["runs"]:
            for stream in (contract.ack_stream(run_id), contract.control_stream(run_id)):
                cursors.setdefault(stream, "$")
        read = asyncio.ensure_future(r.xread(cursors, block=int(TICK_S * 1000), count=100)) if cursors else None
        woken = asyncio.ensure_future(self.wake.wait())
        tasks = [t for t in (read, woken) if t is not None]
        try:
            done, _ = await asyncio.wait(tasks, timeout=TICK_S + 1, return_when=asyncio.FIRST_COMPLETED)
        finally:  # (also when this socket's task is cancelled) collect both, so no error is left unretrieved
            interrupted = read is not None and not read.done()
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        if interrupted:  # an XREAD cut off mid-reply leaves its connection unusable: start over on a fresh one
            cursors.clear()
            await r.connection_pool.disconnect()
            return woken in done
        if read is not None and read.exception() is not None:
            await asyncio.sleep(TICK_S)  # Redis trouble: the next build reports it; do not spin
            return False
        if read is not None:
            for stream, entries in read.result() or []:
                if entries:
                    cursors[stream.decode() if isinstance(stream, bytes) else stream] = entries[-1][0]
            return bool(read.result())
        return woken in done


def _with_session(app):
    """Session auth for this route, unless the whole WebSocket router already has it."""
    authed = AuthMiddlewareStack(app)

    async def route(scope, receive, send):
        return await (app if "user" in scope else authed)(scope, receive, send)
    return route


websocket_urlpatterns = [re_path(r"^ws/operate/$", _with_session(OperateConsumer.as_asgi()))]
