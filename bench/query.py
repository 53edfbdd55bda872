"""Reading stored series on the configured database: full-range queries (the min/max pyramid), the windows endpoint
(the zoom's read), or (--preview) a run page's link-preview image (og:image) over HTTP, cached and cold. Prints one
JSON object."""

from __future__ import annotations

import json
import math
import os
import random
import statistics
import sys
import time
import urllib.request

from harness import ROOT, bench_redis_url, med, parser, report, setup_django, timed_ms, web_server

os.environ.setdefault("REDIS_URL", bench_redis_url())  # (--preview: the cache this process and the server share)
OWN_DB = (None if os.environ.get("DATABASE_URL")
          else ROOT / os.environ.get("OBS_DATA_DIR", "var") / "bench-query.sqlite3")
if OWN_DB is not None:
    os.environ["DATABASE_URL"] = f"sqlite:///{OWN_DB}"
# production settings (DEBUG off: Django's debug cursor would keep every query), with a throw-away key
setup_django(OBS_DEBUG="0", **({} if os.environ.get("DJANGO_SECRET_KEY_FILE") else {"DJANGO_SECRET_KEY": "bench-only"}))

from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402

from observatory import contract  # noqa: E402
from stack import load_series  # noqa: E402
from webapp.metrics import queries, storage  # noqa: E402
from webapp.metrics.models import Series  # noqa: E402
from webapp.runs.models import Run  # noqa: E402

# --- the data: synthetic runs written into the database (the bench's own timing around them where it reports one)
BENCH_RUN, WIN_RUN, PREVIEW_RUN = "bench-query", "bench-windows", "bench-ogimage"


def spikes_of(n: int) -> list[int]:
    return [n // 7, 2 * n // 7 + 11, n // 2 + 3, 5 * n // 7 + 1, n - 2]


def query_run(n: int, name: str):
    """The query run afresh: its series `name`, n points, 50.0 at spikes_of(n)."""
    Run.objects.filter(pk=BENCH_RUN).delete()
    run = Run.objects.create(id=BENCH_RUN, name="query benchmark")
    rnd = random.Random(0)
    spike_set = set(spikes_of(n))
    return load_series(run, name, ((i, 50.0 if i in spike_set else 2.0 + 3.0 * math.exp(-i / (n / 5))
                                    + rnd.random() * 0.05) for i in range(n)))


def seed_preview(steps: int) -> None:
    if Series.objects.filter(run_id=PREVIEW_RUN, name="train/loss", count=steps).exists():
        return
    Run.objects.filter(pk=PREVIEW_RUN).delete()
    run = Run.objects.create(id=PREVIEW_RUN, name="og:image benchmark", state="training", last_step=steps - 1)
    load_series(run, "train/loss", ((i, 2.0 + 3.0 / math.sqrt(1 + i / 500) + (5.0 if i == steps // 3 else 0.0))
                                    for i in range(steps)))


def extend_preview(steps: int, more: int) -> None:
    """Append `more` points through the ingest write path's storage (a run advancing)."""
    s = Series.objects.get(run_id=PREVIEW_RUN, name="train/loss")
    with transaction.atomic():
        storage.bulk_load(s.id, ((i, 2.0 + 3.0 / math.sqrt(1 + i / 500)) for i in range(steps + more)))
    Run.objects.filter(pk=PREVIEW_RUN).update(last_step=steps + more - 1)


def windows_spike(steps: int, i: int) -> int:
    return steps // 2 + 37 * i


def load_windows_run(steps: int, n_series: int) -> list[str]:
    """A run of n_series series, `steps` points each (noisy decays, a one-step spike in each), loaded once."""
    names = [f"bench/s{i}" for i in range(n_series)]
    have = Series.objects.filter(run_id=WIN_RUN, name__in=names, count=steps).count()
    if have == n_series:
        return names
    Run.objects.filter(pk=WIN_RUN).delete()
    run = Run.objects.create(id=WIN_RUN, name="windows benchmark", state="stopped")
    rnd = random.Random(1)
    for i, name in enumerate(names):
        spike = windows_spike(steps, i)
        load_series(run, name, ((k, 50.0 if k == spike else 2.0 + (i + 1) * math.exp(-k / (steps / 5))
                                 + rnd.random() * 0.05) for k in range(steps)))
    return names


def main() -> int:
    ap = parser(__doc__, "query", "ogimage")
    ap.add_argument("--points-total", type=int, help="points in the series (default 10,000,000)")
    ap.add_argument("--points", type=int, nargs="*", default=[1000, 5000, 20000])
    ap.add_argument("--repeat", type=int, help="timed reads of each (default 7; --preview: 30)")
    ap.add_argument("--preview", action="store_true", help="time a run's link-preview image over HTTP instead")
    ap.add_argument("--keep", action="store_true", help="keep the loaded run (re-used by the next call)")
    ap.add_argument("--windows", action="store_true", help="time the windows endpoint (the zoom's read)")
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--series", type=int, default=5)
    ap.add_argument("--spans", type=int, nargs="*", default=[2000, 20_000, 200_000, 1_000_000])
    ap.add_argument("--width", type=int, nargs="*", default=[1200], help="points= (the chart's pixel width)")
    args = ap.parse_args()
    args.repeat = args.repeat or (30 if args.preview else 7)
    call_command("migrate", verbosity=0)
    try:
        if args.preview:
            out = preview_bench(args.steps, args.repeat)
            report("ogimage", out, args.json, not args.no_save)
            return 0 if out["updates_as_run_advances"] else 1
        if args.windows:
            out = windows_bench(args)
        else:
            out = bench(args.points_total or 10_000_000, args.points, args.repeat, args.keep)
        report("query", out, args.json, not args.no_save)
    finally:
        if OWN_DB is not None and not args.keep:
            connection.close()
            for path in OWN_DB.parent.glob(OWN_DB.name + "*"):  # with its -wal and -shm files
                path.unlink()
    return 0


def bench(n: int, points: list[int], repeat: int, keep: bool) -> dict:
    spikes = spikes_of(n)
    series = Series.objects.filter(run_id=BENCH_RUN, name=contract.M_LOSS, count=n).first()
    load_s = None
    if series is None:
        t = time.perf_counter()
        series = query_run(n, contract.M_LOSS)
        load_s = time.perf_counter() - t
    out = {"database": connection.vendor, "points_total": series.count, "load_s": load_s, "queries": []}
    cases = [("full", 0, n - 1, p) for p in points] + [
        ("zoom 1%", n // 2, n // 2 + n // 100, 1000), ("zoom 2k steps", n // 2 - 1000, n // 2 + 1000, 1000)]
    for label, start, end, p in cases:
        times = timed_ms(lambda: queries.window(series, start, end, p), repeat)
        win = queries.window(series, start, end, p)
        got = [s for s, v in zip(win.window.steps, win.window.values) if v == 50.0]
        want = [s for s in spikes if start <= s <= end]
        out["queries"].append({"window": label, "points": p, "returned": len(win.window.steps),
                               "level": win.level, "ms_median": round(statistics.median(times), 2),
                               "ms_min": round(min(times), 2), "spikes_kept": f"{len(set(got) & set(want))}"
                                                                              f"/{len(want)}"})
    if not keep:
        Run.objects.filter(pk=BENCH_RUN).delete()
    return out


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


def preview_bench(steps: int, repeat: int) -> dict:
    """--preview: the og:image of a run with a `steps`-point loss, from the web server `make run` starts (debug on):
    cold (its cache entry dropped), cached, revalidated (304), and whether it follows the run as it advances."""
    from django.core.cache import cache

    from webapp.front import previews

    t0 = time.perf_counter()
    seed_preview(steps)
    seed_s = time.perf_counter() - t0

    def drop_cached():
        run = Run.objects.get(pk=PREVIEW_RUN)
        cache.delete("ogimage:" + previews._key(run, Series.objects.get(run=run, name="train/loss"), None))

    try:
        with web_server({**os.environ, "OBS_DEBUG": "1", "PYTHONPATH": str(ROOT)}) as server:
            url = f"http://127.0.0.1:{server.port}/runs/{PREVIEW_RUN}/preview.png"
            get(url)  # the server's first request imports and connects
            cold, cached, revalidate = [], [], []
            for _ in range(max(3, repeat // 5)):
                drop_cached()
                ms, status, etag, body = get(url)
                assert status == 200 and body[:8] == b"\x89PNG\r\n\x1a\n", status
                cold.append(ms)
            for _ in range(repeat):
                ms, status, etag2, body2 = get(url)
                assert status == 200 and etag2 == etag and body2 == body
                cached.append(ms)
                ms, status, _, _ = get(url, {"If-None-Match": etag})
                assert status == 304
                revalidate.append(ms)
            extend_preview(steps, steps // 8 + 64)  # past the step bucket (~1/64 to 1/32 of the run wide)
            _, status, etag3, body3 = get(url)
            follows = status == 200 and etag3 != etag and body3 != body
    finally:
        Run.objects.filter(pk=PREVIEW_RUN).delete()  # extended: the next call seeds afresh
    return {"steps": steps, "repeat": repeat, "seed_s": round(seed_s, 1), "database": connection.vendor,
            "cached_ms": {"median": med(cached, 2), "p90": round(sorted(cached)[int(0.9 * len(cached))], 2)},
            "not_modified_ms": {"median": med(revalidate, 2)},
            "cold_ms": {"median": med(cold, 2), "max": round(max(cold), 2), "n": len(cold)},
            "png_bytes": len(body), "updates_as_run_advances": follows,
            "load1": round(os.getloadavg()[0], 2), "target_cached_ms": 100}


def time_windows(steps: int, names: list[str], spans: list[int], widths: list[int], repeat: int) -> list[dict]:
    """Median ms per windows request (in process: URL routing, view, queries, JSON body, ETag) at each span."""
    from django.test import Client

    client = Client()
    out = []
    for width in widths:
        for span in spans:
            start = max(0, steps // 2 - span // 2)
            end = min(steps - 1, start + span - 1)
            url = f"/api/runs/{WIN_RUN}/windows/?series={','.join(names)}&start={start}&end={end}&points={width}"
            times = []
            for _ in range(repeat + 1):
                t = time.perf_counter()
                resp = client.get(url, HTTP_HOST="127.0.0.1", secure=True)
                body = resp.content
                times.append((time.perf_counter() - t) * 1000)
            assert resp.status_code == 200, (resp.status_code, body[:300])
            wins = json.loads(body)["windows"]
            spikes = sum(1 for i, n in enumerate(names) if start <= windows_spike(steps, i) <= end
                         and 50.0 in wins[n]["values"])
            want = sum(1 for i in range(len(names)) if start <= windows_spike(steps, i) <= end)
            out.append({"span": end - start + 1, "points": width, "series": len(names),
                        "ms": times[1:],  # the first is a warm-up
                        "returned": max(len(w["steps"]) for w in wins.values()),
                        "levels": sorted({w["level"] for w in wins.values()}), "bytes": len(body),
                        "spikes_kept": f"{spikes}/{want}"})
    return out


def windows_bench(args) -> dict:
    names = load_windows_run(args.steps, args.series)
    load_before = os.getloadavg()
    res = time_windows(args.steps, names, args.spans, args.width, args.repeat)
    for r in res:
        r["ms_median"] = round(statistics.median(r.pop("ms")), 2)
    if not args.keep:
        Run.objects.filter(pk=WIN_RUN).delete()
    return {"database": connection.vendor, "steps": args.steps, "load_before": load_before, "cases": res,
            "load_after": os.getloadavg()}


if __name__ == "__main__":
    sys.exit(main())
