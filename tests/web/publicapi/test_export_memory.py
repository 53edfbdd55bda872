"""A large series exports in bounded memory: the peak of the Python heap (tracemalloc) and of Arrow's memory
pool while streaming 500k points (OBS_EXPORT_TEST_POINTS) stays at about one keyset page (10k points), a small
fraction of the rows' size: the series is never loaded whole. Throughput is not measured (bench/results/export.md)."""

from __future__ import annotations

import asyncio
import os
import tracemalloc
import warnings

import pyarrow as pa
import pytest
from asgiref.sync import sync_to_async

from webapp.metrics import bulk, storage
from webapp.metrics.models import Point, Series
from webapp.runs.models import Run

N = int(os.environ.get("OBS_EXPORT_TEST_POINTS", 500_000))


def _load() -> None:
    """N raw points written with the bulk writer (no pyramid: full-resolution exports read raw points only)."""
    run = Run.objects.create(id="export-big", name="big", state="stopped")
    s = Series.objects.create(run=run, name="train/loss")
    for lo in range(0, N, 100_000):
        bulk.insert(Point._meta.db_table, storage.POINT_COLS,
                    [(s.id, i, 1.0 + (i % 1000) * 1e-3, 0) for i in range(lo, min(N, lo + 100_000))])
    Series.objects.filter(pk=s.pk).update(count=N, first_step=0, last_step=N - 1)


def _stream(client, url: str) -> tuple[int, int, int]:
    """(bytes streamed, peak Python heap growth, peak Arrow pool growth) while consuming the answer."""
    pool = pa.default_memory_pool()
    arrow_before = pool.bytes_allocated()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        resp = client.get(url)
        assert resp.status_code == 200 and resp.streaming
        size = sum(len(chunk) for chunk in resp.streaming_content)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    return size, peak, pool.max_memory() - arrow_before


@pytest.mark.slow
@pytest.mark.django_db
def test_a_large_series_exports_in_bounded_memory(client):
    _load()
    rows_in_memory = N * 136  # the rows as Python (step, value) tuples: tuple 56 + int 32 + float 24 + list slot
    for fmt in ("csv", "parquet"):
        size, peak, arrow_peak = _stream(client, f"/api/v1/runs/export-big/export.{fmt}")
        assert size > (20 * N if fmt == "csv" else 1000)
        assert peak < 16 * 2**20, f"{fmt}: Python heap grew by {peak / 2**20:.1f} MiB"  # ~one page, whatever N is
        assert peak < rows_in_memory / 5, f"{fmt}: {peak / 2**20:.1f} MiB"
        assert arrow_peak < 64 * 2**20, f"{fmt}: Arrow pool peaked at {arrow_peak / 2**20:.1f} MiB"


async def _through_asgi(path: str) -> tuple[int, int, int, list[str]]:
    """(bytes streamed, body messages, peak Python heap growth, warnings) while the ASGI application the web server
    runs (uvicorn: webapp.asgi) answers GET `path`, its messages consumed as uvicorn would."""
    from webapp.asgi import application

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
             "headers": [(b"host", b"127.0.0.1")], "client": ("127.0.0.1", 40000), "server": ("127.0.0.1", 8000)}
    asked = asyncio.Event()

    async def receive():
        if not asked.is_set():
            asked.set()
            return {"type": "http.request", "body": b"", "more_body": False}
        await asyncio.Event().wait()  # the client stays connected

    got = {"status": None, "bytes": 0, "messages": 0}

    async def send(message):
        if message["type"] == "http.response.start":
            got["status"] = message["status"]
        elif message["type"] == "http.response.body" and message.get("body"):
            got["bytes"] += len(message["body"])
            got["messages"] += 1

    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            await application(scope, receive, send)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert got["status"] == 200, got
    return got["bytes"], got["messages"], peak, [str(w.message) for w in caught]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)  # the ASGI handler runs the view in a thread of its own: committed rows
async def test_an_export_streams_through_the_asgi_server_in_bounded_memory():
    """Under uvicorn (make run, the image) Django answered a streamed export by collecting the whole generator in a
    list first ("StreamingHttpResponse must consume synchronous iterators"): 500k points' CSV held in memory at once
    and nothing sent until the last row was read. It goes out a chunk at a time, as through the test client."""
    await sync_to_async(_load)()
    for path in ("/api/v1/runs/export-big/export.csv", "/api/v1/runs/export-big/export.parquet",
                 "/api/v1/runs/export-big/records.json"):
        size, messages, peak, warned = await _through_asgi(path)
        if path.endswith(".csv"):
            assert size > 20 * N and messages > 10, (size, messages)
            assert peak < size / 2, f"{path}: the Python heap grew by {peak / 2**20:.1f} MiB for {size / 2**20:.1f} MiB"
        assert not [w for w in warned if "synchronous iterators" in w], (path, warned)
