"""Export throughput: a full-resolution series streamed as CSV, JSON and Parquet. Prints one JSON object.

    .venv/bin/python bench/export.py --json [--points N] [--repeat R]

What it measures and how: docs/PERFORMANCE.md, `export` (bench/results/export.md).
"""

from __future__ import annotations

import os
import tempfile
import sys
import time
import tracemalloc

from harness import django_here, parser, report  # bench/, this script's directory, is first on sys.path

# production settings (DEBUG off: Django's debug cursor would keep every query), with a throw-away key
django_here(os.path.join(tempfile.gettempdir(), "obs-bench-export.sqlite3"), debug=False)

import django  # noqa: E402
from django.test import RequestFactory  # noqa: E402

from webapp.metrics import bulk, storage  # noqa: E402
from webapp.metrics.models import Point, Series  # noqa: E402
from webapp.transfer import exports  # noqa: E402
from webapp.runs.models import Run  # noqa: E402

BENCH_RUN = "bench-export"


def load(n: int) -> None:
    Run.objects.filter(pk=BENCH_RUN).delete()
    run = Run.objects.create(id=BENCH_RUN, name="export benchmark", state="stopped")
    s = Series.objects.create(run=run, name="train/loss")
    for lo in range(0, n, 200_000):
        bulk.insert(Point._meta.db_table, storage.POINT_COLS,
                    [(s.id, i, 2.0 + ((i * 7919) % 1000) / 997.0, 0) for i in range(lo, min(n, lo + 200_000))])
    Series.objects.filter(pk=s.pk).update(count=n, first_step=0, last_step=n - 1)


def stream(fmt: str) -> int:
    run = Run.objects.get(pk=BENCH_RUN)
    plan = exports.Plan(RequestFactory().get("/"), run)
    return sum(len(chunk) for chunk in exports.STREAMS[fmt](plan))


def bench(n: int, repeat: int) -> dict:
    t = time.perf_counter()
    load(n)
    out = {"points": n, "database": django.db.connection.vendor, "load_s": round(time.perf_counter() - t, 2),
           "chunk_rows": exports.CHUNK, "formats": {}}
    for fmt in ("csv", "json", "parquet"):
        best, size = float("inf"), 0
        for _ in range(repeat):
            t = time.perf_counter()
            size = stream(fmt)
            best = min(best, time.perf_counter() - t)
        tracemalloc.start()
        stream(fmt)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        out["formats"][fmt] = {"seconds": round(best, 3), "points_per_s": round(n / best),
                               "mb_per_s": round(size / best / 1e6, 1), "bytes": size,
                               "python_heap_peak_mb": round(peak / 2**20, 1)}
    Run.objects.filter(pk=BENCH_RUN).delete()
    return out


def main() -> int:
    ap = parser(__doc__)
    ap.add_argument("--points", type=int, default=2_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    report("export", bench(args.points, args.repeat), args.json, not args.no_save)
    return 0


if __name__ == "__main__":
    sys.exit(main())
