"""JSON API for series: GET /api/runs/<id>/metrics/, GET /api/runs/<id>/metrics/<name>/?start=&end=&points=,
GET /api/runs/<id>/windows/?series=a,b&start=&end=&points= (one step window of several series: a zoom reads every
chart's series in one request; `&format=f64`: the same windows packed, their points as float64 columns, what the
dashboard's zoom reads), and GET /api/compare/?runs=a,b,c, the compare page's read (webapp.runs.compare).
"""

import json
import struct
import time
from collections import defaultdict

from django.db import connection
from django.http import HttpResponse, JsonResponse

from observatory import contract
from webapp.accounts.permissions import public
from webapp.api import ApiError, api_view, cached, found, int_param
from webapp.metrics import queries
from webapp.metrics.models import Series
from webapp.runs import pagedata
from webapp.runs.api import get_run
from webapp.runs.compare import MAX_RUNS, run_ids
from webapp.runs.models import ENDED_STATES, Run

MAX_STEP = 2**62
MAX_BATCH = 32  # series per /windows/ request


@public
@api_view
def metric_list(request, run_id: str):
    run = get_run(run_id)
    return JsonResponse({"run_id": run.id, "metrics": metric_rows(run)})


def series_window(run, series: Series, start: int, end: int, points: int, win=None) -> dict:
    """The body of GET /api/runs/<id>/metrics/<name>/ (also inlined into the dashboard page: firstpaint.py); `win`:
    its queries.window(), read already."""
    win = win or queries.window(series, start, end, points)
    return {"run_id": run.id, "metric": series.name, "points": points, "first_step": series.first_step,
            "last_step": series.last_step, **win.as_json()}


def metric_rows(run) -> list[dict]:
    """The body of GET /api/runs/<id>/metrics/ (its `metrics` list)."""
    return list(Series.objects.filter(run=run).order_by("name").values("name", "count", "first_step", "last_step"))


def _window_params(request) -> tuple[int, int, int]:
    start = int_param(request, "start", 0, lo=0, hi=MAX_STEP)
    end = int_param(request, "end", MAX_STEP, lo=0, hi=MAX_STEP)
    points = int_param(request, "points", queries.DEFAULT_POINTS, lo=queries.MIN_POINTS, hi=queries.MAX_POINTS)
    if start > end:
        raise ApiError(400, "parameter 'end' must be >= start", parameter="end")
    return start, end, points


def _series_rows(run_id: str, names: list[str]) -> tuple[str | None, dict[str, Series]]:
    """(the run's state, {name: Series with the fields a window reads}) for the run's series among `names`, in one
    plain query: the ORM's select_related built two model instances a series (~1/3 of a small window's CPU)."""
    if not names:
        return None, {}
    qn = connection.ops.quote_name
    sql = (f"SELECT s.{qn('id')}, s.{qn('name')}, s.{qn('count')}, s.{qn('first_step')}, s.{qn('last_step')}, "
           f"r.{qn('state')} FROM {qn(Series._meta.db_table)} s JOIN {qn(Run._meta.db_table)} r "
           f"ON r.{qn('id')} = s.{qn('run_id')} WHERE s.{qn('run_id')} = %s "
           f"AND s.{qn('name')} IN ({', '.join(['%s'] * len(names))})")
    with connection.cursor() as cur:
        cur.execute(sql, [run_id, *names])
        rows = cur.fetchall()
    found = {name: Series(id=sid, run_id=run_id, name=name, count=count, first_step=first, last_step=last)
             for sid, name, count, first, last, _ in rows}
    return (rows[0][5] if rows else None), found


@public
@api_view
def metric_windows(request, run_id: str):
    """The same window of several series: {"windows": {name: <what /metrics/<name>/ answers> or null}}."""
    t0 = time.perf_counter()
    names = list(dict.fromkeys(n for raw in request.GET.getlist("series") for n in raw.split(",") if n))
    # the series with their run's state in one query (the run alone, or its 404, when none of them is stored)
    state, found = _series_rows(run_id, names[:MAX_BATCH])
    run = Run(id=run_id, state=state) if found else get_run(run_id)
    start, end, points = _window_params(request)
    packed = request.GET.get("format", "json")
    if packed not in ("json", "f64"):
        raise ApiError(400, "parameter 'format' must be json or f64", parameter="format")
    if not names:
        raise ApiError(400, "parameter 'series' is required (names, comma-separated or repeated)", parameter="series")
    if len(names) > MAX_BATCH:
        raise ApiError(400, f"at most {MAX_BATCH} series per request", parameter="series")
    t1 = time.perf_counter()
    read = [n for n in names if n in found]  # their reads made together: as many round trips as one series'
    wins = dict(zip(read, queries.windows([found[n] for n in read], start, end, points)))
    body = {n: series_window(run, found[n], start, end, points, wins[n]) if n in found else None for n in names}
    t2 = time.perf_counter()
    if packed == "f64":
        resp = packed_windows(run.id, points, body)
    else:
        resp = JsonResponse({"run_id": run.id, "points": points, "windows": body},
                            json_dumps_params={"separators": (",", ":")})  # (no blanks: ~7% of a window's bytes)
    t3 = time.perf_counter()
    resp = cached(request, resp, immutable=run.state in ENDED_STATES)
    # what the server spent, for the browser's Resource Timing (bench/dashboard.py --profile reads it)
    resp["Server-Timing"] = (f"lookup;dur={(t1 - t0) * 1e3:.2f}, read;dur={(t2 - t1) * 1e3:.2f}, "
                             f"json;dur={(t3 - t2) * 1e3:.2f}, etag;dur={(time.perf_counter() - t3) * 1e3:.2f}")
    return resp


def packed_windows(run_id: str, points: int, body: dict) -> HttpResponse:
    """format=f64: what the JSON answer says, with each window's `steps` and `values` as little-endian float64
    columns after a JSON header instead of as JSON numbers (no float formatting here, no parsing in the page: a zoom's
    ~100 KB of points were most of its JSON time). Layout: a uint32 (little-endian) header length H; H bytes of JSON
    {"run_id", "points", "windows": {name: the window less its steps and values, plus "n" (its points) and "at" (where
    its n steps start, its n values right after them: a byte offset into the columns), or null}}; zero padding to a
    multiple of 8 bytes; the columns. A non-finite point's value (JSON's null) is NaN; steps are exact up to 2**53,
    as in JavaScript's JSON."""
    import numpy as np

    head, cols, at = {}, [], 0
    for name, win in body.items():
        if win is None:
            head[name] = None
            continue
        meta = {k: v for k, v in win.items() if k not in ("steps", "values")}
        head[name] = {**meta, "n": len(win["steps"]), "at": at}
        cols += [np.asarray(win["steps"], dtype="<f8"), np.asarray(win["values"], dtype="<f8")]
        at += 16 * len(win["steps"])
    raw = json.dumps({"run_id": run_id, "points": points, "windows": head}, separators=(",", ":")).encode()
    parts = [struct.pack("<I", len(raw)), raw, b"\0" * (-(4 + len(raw)) % 8), *(c.tobytes() for c in cols)]
    return HttpResponse(b"".join(parts), content_type="application/octet-stream")


@public
@api_view
def metric_series(request, run_id: str, name: str):
    run = get_run(run_id)
    start, end, points = _window_params(request)
    series = found(Series.objects.filter(run=run, name=name).first(), f"metric {name!r} not found in run {run.id!r}")
    resp = JsonResponse(series_window(run, series, start, end, points))
    # A finished run's history can no longer change (no more points, no rewind): cacheable by anyone. A live
    # run's window may still grow or be superseded by a rollback: revalidate every time.
    return cached(request, resp, immutable=run.state in ENDED_STATES)


def _entry(run: Run, metrics: list[dict]) -> dict:
    started = pagedata.first_started(run)
    return {**run.summary(), "started": started.isoformat() if started else None,
            "time_anchors": pagedata.time_anchors(run), "rewinds": pagedata.rewinds(run), "metrics": metrics}


@public
@api_view
def compare_runs(request):
    """{"runs": [{summary…, "started", "time_anchors", "rewinds", "metrics": [{name, count, first_step, last_step}]}],
    "tokens_metric"}, in the order asked for: each run's series names (the page's metric picker offers their union)
    and its x axes (tokens from its `tokens_metric` series, wall time from its (step, time) anchors, relative to
    `started`). A malformed id or too many runs: 400; runs that do not exist: 404 naming them in `missing`."""
    ids = run_ids(request)
    if not ids:
        raise ApiError(400, "parameter 'runs' must name at least one run (runs=a,b,c)", parameter="runs")
    runs = {r.id: r for r in Run.objects.filter(pk__in=ids)}
    missing = [rid for rid in ids if rid not in runs]
    if missing:
        raise ApiError(404, f"no such run: {', '.join(missing)}", missing=missing)
    metrics: dict[str, list[dict]] = defaultdict(list)
    rows = (Series.objects.filter(run_id__in=ids).order_by("run_id", "name")
            .values("run_id", "name", "count", "first_step", "last_step"))
    for row in rows.iterator():
        metrics[row.pop("run_id")].append(row)
    return JsonResponse({"runs": [_entry(runs[rid], metrics[rid]) for rid in ids],
                         "tokens_metric": contract.M_TOTAL_TOKENS, "max_runs": MAX_RUNS})
