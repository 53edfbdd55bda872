"""Link-preview image speed: a run page's og:image over HTTP, cached and cold. Prints one JSON object (--json: only it).

    .venv/bin/python bench/ogimage.py [--json] [--steps 1000000] [--repeat 30] [--db PATH]

What it measures and how: docs/PERFORMANCE.md, `ogimage` (bench/results/ogimage.md).
"""

from __future__ import annotations

import math
import os
import sys
import time
import urllib.request

from harness import django_here, med, parser, report, web_server
from stack import load_series

RUN_ID = "bench-ogimage"


def seed(steps: int) -> None:
    from webapp.metrics.models import Series
    from webapp.runs.models import Run

    if Series.objects.filter(run_id=RUN_ID, name="train/loss", count=steps).exists():
        return
    Run.objects.filter(pk=RUN_ID).delete()
    run = Run.objects.create(id=RUN_ID, name="og:image benchmark", state="training", last_step=steps - 1)
    load_series(run, "train/loss", ((i, 2.0 + 3.0 / math.sqrt(1 + i / 500) + (5.0 if i == steps // 3 else 0.0))
                                    for i in range(steps)))


def extend(steps: int, more: int) -> None:
    """Append `more` points through the ingest write path's storage (a run advancing)."""
    from django.db import transaction

    from webapp.metrics import storage
    from webapp.metrics.models import Series
    from webapp.runs.models import Run

    s = Series.objects.get(run_id=RUN_ID, name="train/loss")
    with transaction.atomic():
        storage.bulk_load(s.id, ((i, 2.0 + 3.0 / math.sqrt(1 + i / 500)) for i in range(steps + more)))
    Run.objects.filter(pk=RUN_ID).update(last_step=steps + more - 1)


def get(url: str, headers: dict | None = None) -> tuple[float, int, str, bytes]:
    req = urllib.request.Request(url, headers=headers or {})
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            body = r.read()
            status, etag = r.status, r.headers.get("ETag", "")
    except urllib.error.HTTPError as e:  # 304 arrives as an HTTPError
        body, status, etag = b"", e.code, e.headers.get("ETag", "")
    return (time.perf_counter() - t0) * 1000, status, etag, body


def main() -> int:
    ap = parser(__doc__, db="ogimage")
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=30)
    args = ap.parse_args()
    env = django_here(args.db)
    from django.core.cache import cache

    from webapp.front import previews
    from webapp.metrics.models import Series
    from webapp.runs.models import Run

    t0 = time.perf_counter()
    seed(args.steps)
    seed_s = time.perf_counter() - t0

    def drop_cached():
        run = Run.objects.get(pk=RUN_ID)
        cache.delete("ogimage:" + previews._key(run, Series.objects.get(run=run, name="train/loss"), None))

    try:
        with web_server(env) as server:
            url = f"http://127.0.0.1:{server.port}/runs/{RUN_ID}/preview.png"
            get(url)  # the server's first request imports and connects
            cold, cached, revalidate = [], [], []
            for _ in range(max(3, args.repeat // 5)):
                drop_cached()
                ms, status, etag, body = get(url)
                assert status == 200 and body[:8] == b"\x89PNG\r\n\x1a\n", status
                cold.append(ms)
            for _ in range(args.repeat):
                ms, status, etag2, body2 = get(url)
                assert status == 200 and etag2 == etag and body2 == body
                cached.append(ms)
                ms, status, _, _ = get(url, {"If-None-Match": etag})
                assert status == 304
                revalidate.append(ms)
            extend(args.steps, args.steps // 8 + 64)  # past the step bucket (~1/64 to 1/32 of the run wide)
            _, status, etag3, body3 = get(url)
            follows = status == 200 and etag3 != etag and body3 != body
    finally:
        Run.objects.filter(pk=RUN_ID).delete()  # extended: the next call seeds afresh

    out = {"steps": args.steps, "repeat": args.repeat, "seed_s": round(seed_s, 1),
           "database": "postgresql" if "postgres" in env["DATABASE_URL"] else "sqlite",
           "cached_ms": {"median": med(cached, 2), "p90": round(sorted(cached)[int(0.9 * len(cached))], 2)},
           "not_modified_ms": {"median": med(revalidate, 2)},
           "cold_ms": {"median": med(cold, 2), "max": round(max(cold), 2), "n": len(cold)},
           "png_bytes": len(body), "updates_as_run_advances": follows,
           "load1": round(os.getloadavg()[0], 2), "target_cached_ms": 100}
    report("ogimage", out, args.json, not args.no_save)
    return 0 if follows else 1


if __name__ == "__main__":
    sys.exit(main())
