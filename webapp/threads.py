"""Django's ASGI handler with request threads that outlive their request.

Django's ASGIHandler runs each request in a ThreadSensitiveContext of its own: the request's sync parts (signals,
sync middleware, sync views, the async ORM's queries) run in a thread made for that request and joined after it.
Django's database connections belong to a thread, so every request opened a new one (CONN_MAX_AGE cannot help: its
thread is gone) and paid a thread's start and join. Here each request still has a thread to itself for its whole
length (one request at a time per thread, as Django requires), but the thread comes from a pool of idle ones, like
a threaded WSGI server's: its connection is kept between requests, CONN_MAX_AGE and CONN_HEALTH_CHECKS (settings)
decide its reuse as in any Django deployment. At most IDLE_THREADS wait (so at most that many idle connections); a
thread beyond them (more requests at once) closes its connections and ends after its request.

Also the middleware chain and the view run as Django runs them under WSGI: in one call on the request's thread.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.core.handlers.asgi import ASGIHandler
from django.db import connections

IDLE_THREADS = 8


class RequestThreads:
    """Single-thread executors, one per request in flight, reused (at most `idle` kept waiting)."""

    def __init__(self, idle: int = IDLE_THREADS):
        self.idle, self.free = idle, []
        self.started = 0  # executors made (a test reads it: reuse keeps it flat)

    def take(self) -> ThreadPoolExecutor:
        if self.free:
            return self.free.pop()
        self.started += 1
        return ThreadPoolExecutor(max_workers=1, thread_name_prefix="request")

    async def give(self, executor: ThreadPoolExecutor) -> None:
        if len(self.free) < self.idle:
            self.free.append(executor)
            return
        await self.end(executor)

    async def end(self, executor: ThreadPoolExecutor) -> None:
        """Close the thread's database connections and let it end."""
        await asyncio.get_running_loop().run_in_executor(executor, connections.close_all)
        executor.shutdown(wait=False)

    async def close(self) -> None:
        """End every idle thread (their connections closed)."""
        while self.free:
            await self.end(self.free.pop())


class PooledASGIHandler(ASGIHandler):
    """Also: the middleware chain and the view run as Django runs them under WSGI, in one call on the request's
    thread. Django's async chain went to that thread and back for each stretch of sync middleware, for CSRF's
    process_view and for each sync view (every middleware and view here is sync-capable; an async view would run
    through async_to_sync, as under WSGI)."""
    threads = RequestThreads()

    def load_middleware(self, is_async=False):
        super().load_middleware(is_async=False)

    async def get_response_async(self, request):
        return await sync_to_async(self.get_response, thread_sensitive=True)(request)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        executor = self.threads.take()
        try:
            async with ThreadSensitiveContext(executor=executor):
                await self.handle(scope, receive, send)
        finally:  # (idle by now: a cancelled request's request_finished signal queued behind its view there)
            await self.threads.give(executor)
