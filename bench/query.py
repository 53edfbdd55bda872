"""Full-range series queries (the min/max pyramid) on the configured database. Prints one JSON object.

    .venv/bin/python bench/query.py [--points-total N] [--points P ...] [--repeat R] [--keep]

Loads an N-point series with 5 one-step spikes into a throwaway run, times full-range and zoomed window queries,
checks every spike is kept, then deletes the run. Benchmark, not a test: run it on the database you deploy on
(PostgreSQL via DATABASE_URL, migrated first); without DATABASE_URL on its own SQLite file under OBS_DATA_DIR
(var/bench-query.sqlite3), migrated, and deleted afterwards unless --keep.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
# production settings (DEBUG off: Django's debug cursor would keep every query), with a throw-away key
os.environ.setdefault("OBS_DEBUG", "0")
if not os.environ.get("DJANGO_SECRET_KEY_FILE"):
    os.environ.setdefault("DJANGO_SECRET_KEY", "bench-only")
OWN_DB = (None if os.environ.get("DATABASE_URL")
          else ROOT / os.environ.get("OBS_DATA_DIR", "var") / "bench-query.sqlite3")
if OWN_DB is not None:
    os.environ["DATABASE_URL"] = f"sqlite:///{OWN_DB}"

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402

from observatory import contract  # noqa: E402
from webapp.metrics import queries, storage  # noqa: E402
from webapp.metrics.models import Series  # noqa: E402
from webapp.runs.models import Run  # noqa: E402

BENCH_RUN = "bench-query"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points-total", type=int, default=10_000_000)
    ap.add_argument("--points", type=int, nargs="*", default=[1000, 5000, 20000])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--keep", action="store_true", help="keep the loaded run (re-used by the next call)")
    args = ap.parse_args()
    call_command("migrate", verbosity=0)
    try:
        print(json.dumps(bench(args.points_total, args.points, args.repeat, args.keep), indent=2))
    finally:
        if OWN_DB is not None and not args.keep:
            connection.close()
            for path in OWN_DB.parent.glob(OWN_DB.name + "*"):  # with its -wal and -shm files
                path.unlink()
    return 0


def bench(n: int, points: list[int], repeat: int, keep: bool) -> dict:
    spikes = [n // 7, 2 * n // 7 + 11, n // 2 + 3, 5 * n // 7 + 1, n - 2]
    series = Series.objects.filter(run_id=BENCH_RUN, name=contract.M_LOSS, count=n).first()
    load_s = None
    if series is None:
        Run.objects.filter(pk=BENCH_RUN).delete()
        run = Run.objects.create(id=BENCH_RUN, name="query benchmark")
        series = Series.objects.create(run=run, name=contract.M_LOSS)
        rnd = random.Random(0)
        spike_set = set(spikes)
        t = time.perf_counter()
        with transaction.atomic():
            storage.bulk_load(series.id, ((i, 50.0 if i in spike_set else
                                           2.0 + 3.0 * math.exp(-i / (n / 5)) + rnd.random() * 0.05)
                                          for i in range(n)))
        load_s = time.perf_counter() - t
        series.refresh_from_db()
    out = {"database": connection.vendor, "points_total": series.count, "load_s": load_s, "queries": []}
    cases = [("full", 0, n - 1, p) for p in points] + [
        ("zoom 1%", n // 2, n // 2 + n // 100, 1000), ("zoom 2k steps", n // 2 - 1000, n // 2 + 1000, 1000)]
    for label, start, end, p in cases:
        times = []
        for _ in range(repeat):
            t = time.perf_counter()
            win = queries.window(series, start, end, p)
            times.append((time.perf_counter() - t) * 1000)
        got = [s for s, v in zip(win.window.steps, win.window.values) if v == 50.0]
        want = [s for s in spikes if start <= s <= end]
        out["queries"].append({"window": label, "points": p, "returned": len(win.window.steps),
                               "level": win.level, "ms_median": round(statistics.median(times), 2),
                               "ms_min": round(min(times), 2), "spikes_kept": f"{len(set(got) & set(want))}"
                                                                              f"/{len(want)}"})
    if not keep:
        Run.objects.filter(pk=BENCH_RUN).delete()
    return out


if __name__ == "__main__":
    sys.exit(main())
