"""JSON API for series: GET /api/runs/<id>/metrics/, GET /api/runs/<id>/metrics/<name>/?start=&end=&points=, and
GET /api/runs/<id>/windows/?series=a,b&start=&end=&points= (one step window of several series: a zoom reads every
chart's series in one request)."""

from django.http import JsonResponse

from webapp.accounts.permissions import public
from webapp.api import ApiError, api_view, cached, int_param
from webapp.metrics import queries
from webapp.metrics.models import Series
from webapp.runs.api import get_run
from webapp.runs.models import ENDED_STATES

MAX_STEP = 2**62
MAX_BATCH = 32  # series per /windows/ request


@public
@api_view
def metric_list(request, run_id: str):
    run = get_run(run_id)
    return JsonResponse({"run_id": run.id, "metrics": metric_rows(run)})


def series_window(run, series: Series, start: int, end: int, points: int) -> dict:
    """The body of GET /api/runs/<id>/metrics/<name>/ (also inlined into the dashboard page: firstpaint.py)."""
    win = queries.window(series, start, end, points)
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


@public
@api_view
def metric_windows(request, run_id: str):
    """The same window of several series: {"windows": {name: <what /metrics/<name>/ answers> or null}}."""
    run = get_run(run_id)
    start, end, points = _window_params(request)
    names = list(dict.fromkeys(n for raw in request.GET.getlist("series") for n in raw.split(",") if n))
    if not names:
        raise ApiError(400, "parameter 'series' is required (names, comma-separated or repeated)", parameter="series")
    if len(names) > MAX_BATCH:
        raise ApiError(400, f"at most {MAX_BATCH} series per request", parameter="series")
    found = {s.name: s for s in Series.objects.filter(run=run, name__in=names)}
    resp = JsonResponse({"run_id": run.id, "points": points, "windows": {
        n: series_window(run, found[n], start, end, points) if n in found else None for n in names}})
    return cached(request, resp, immutable=run.state in ENDED_STATES)


@public
@api_view
def metric_series(request, run_id: str, name: str):
    run = get_run(run_id)
    start, end, points = _window_params(request)
    series = Series.objects.filter(run=run, name=name).first()
    if series is None:
        raise ApiError(404, f"metric {name!r} not found in run {run.id!r}")
    resp = JsonResponse(series_window(run, series, start, end, points))
    # A finished run's history can no longer change (no more points, no rewind): cacheable by anyone. A live
    # run's window may still grow or be superseded by a rollback: revalidate every time.
    return cached(request, resp, immutable=run.state in ENDED_STATES)
