"""The ASGI handler's request threads (webapp.threads): sequential requests reuse one thread and its database
connection, the middleware chain runs in one call on that thread, and every middleware's effect is still there."""

import asyncio
import threading

import pytest
from asgiref.sync import iscoroutinefunction
from asgiref.testing import ApplicationCommunicator
from django.db import connections
from django.db.backends.signals import connection_created

from webapp.asgi import django_http
from webapp.ops import probes
from webapp.threads import IDLE_THREADS, PooledASGIHandler, RequestThreads

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def api_run(db):
    from webapp.runs.models import Run

    return Run.objects.create(id="threads-run", name="threads-run")


@pytest.fixture
def kept_connections():
    """CONN_MAX_AGE as deployed (tests run with 0), for this test; its threads and their connections closed after."""
    shared = connections["default"].settings_dict  # (one dict: every thread's connection reads it)
    saved = shared["CONN_MAX_AGE"]
    shared["CONN_MAX_AGE"] = 60
    yield
    shared["CONN_MAX_AGE"] = saved
    asyncio.run(django_http.threads.close())


async def _get(app, path: str, query: str = "") -> tuple[int, dict[str, str], bytes]:
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": query.encode(), "root_path": "",
             "headers": [(b"host", b"127.0.0.1")], "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 80)}
    comm = ApplicationCommunicator(app, scope)
    await comm.send_input({"type": "http.request", "body": b"", "more_body": False})
    start = await comm.receive_output(10)
    body = b""
    while True:
        msg = await comm.receive_output(10)
        body += msg.get("body", b"")
        if not msg.get("more_body"):
            break
    await comm.wait(10)
    return start["status"], {k.decode().lower(): v.decode() for k, v in start["headers"]}, body


def test_sequential_requests_reuse_one_thread_and_one_database_connection(api_run, redis_client, kept_connections):
    opened = []

    def count(sender, connection, **kw):
        opened.append(threading.get_ident())
    connection_created.connect(count)
    try:
        async def twenty():
            before = django_http.threads.started
            for i in range(20):
                status, _, _ = await _get(django_http, "/healthz" if i % 2 else f"/api/runs/{api_run.id}/metrics/")
                assert status == 200
            return django_http.threads.started - before
        made = asyncio.run(twenty())
    finally:
        connection_created.disconnect(count)
    assert made <= 1, f"{made} request threads made for 20 sequential requests"
    assert len(opened) <= 1, f"{len(opened)} database connections opened for 20 sequential requests"


def test_the_middleware_chain_is_one_sync_call_and_keeps_every_header(api_run, redis_client):
    assert isinstance(django_http, PooledASGIHandler)
    assert not iscoroutinefunction(django_http._middleware_chain)  # one hand-off to the thread, not one per stretch
    status, headers, _ = asyncio.run(_get(django_http, f"/api/v1/runs/{api_run.id}/metrics/"))
    assert status == 200 and headers["api-version"] == "1"
    assert headers["x-frame-options"] == "DENY" and headers["x-content-type-options"] == "nosniff"
    assert "content-security-policy" in headers
    status, headers, body = asyncio.run(_get(django_http, "/api/v9/runs/"))
    assert status == 404 and b'"code":' in body.replace(b" ", b"") and headers["api-version"] == "1"


def test_threads_beyond_the_idle_ones_close_their_connections_and_end():
    async def burst():
        pool = RequestThreads(idle=1)
        first, second = pool.take(), pool.take()
        assert pool.started == 2 and first is not second
        await pool.give(first)
        await pool.give(second)  # one too many: closed
        assert pool.free == [first] and second._shutdown
        assert pool.take() is first and pool.started == 2
    asyncio.run(burst())
    assert IDLE_THREADS >= 1


def test_the_probes_keep_one_redis_client_and_still_see_redis_go_away(client, db, redis_client, settings):
    assert probes.client() is probes.client()
    assert client.get("/healthz").status_code == 200
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    resp = client.get("/healthz")
    assert resp.status_code == 503 and resp.json()["redis"].startswith("unavailable")


def test_what_starting_up_made_is_out_of_the_cycle_collectors_sight():
    """webapp.asgi freezes the objects made at start-up (gc.freeze): a full collection in a request walks only what
    requests made, not every module, setting and URL pattern of the process."""
    import os
    import subprocess
    import sys

    code = "import gc, webapp.asgi; print(gc.get_freeze_count(), len(gc.get_objects()))"
    env = {**os.environ, "OBS_DEBUG": "1"}  # (settings outside test mode: no secret key needed)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120,
                         check=True).stdout.split()
    frozen, in_sight = int(out[0]), int(out[1])
    assert frozen > 10_000 and in_sight < frozen / 4, (frozen, in_sight)
