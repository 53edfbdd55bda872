"""JSON API for series: GET /api/runs/<id>/metrics/ and GET /api/runs/<id>/metrics/<name>/?start=&end=&points=."""

from django.http import JsonResponse

from webapp.accounts.permissions import public
from webapp.api import ApiError, api_view, cached, int_param
from webapp.metrics import queries
from webapp.metrics.models import Series
from webapp.runs.api import get_run
from webapp.runs.models import ENDED_STATES

MAX_STEP = 2**62


@public
@api_view
def metric_list(request, run_id: str):
    run = get_run(run_id)
    rows = Series.objects.filter(run=run).order_by("name").values("name", "count", "first_step", "last_step")
    return JsonResponse({"run_id": run.id, "metrics": list(rows)})


@public
@api_view
def metric_series(request, run_id: str, name: str):
    run = get_run(run_id)
    start = int_param(request, "start", 0, lo=0, hi=MAX_STEP)
    end = int_param(request, "end", MAX_STEP, lo=0, hi=MAX_STEP)
    points = int_param(request, "points", queries.DEFAULT_POINTS, lo=queries.MIN_POINTS, hi=queries.MAX_POINTS)
    if start > end:
        raise ApiError(400, "parameter 'end' must be >= start", parameter="end")
    series = Series.objects.filter(run=run, name=name).first()
    if series is None:
        raise ApiError(404, f"metric {name!r} not found in run {run.id!r}")
    win = queries.window(series, start, end, points)
    resp = JsonResponse({"run_id": run.id, "metric": name, "points": points, "first_step": series.first_step,
                         "last_step": series.last_step, **win.as_json()})
    # A finished run's history can no longer change (no more points, no rewind): cacheable by anyone. A live
    # run's window may still grow or be superseded by a rollback: revalidate every time.
    return cached(request, resp, immutable=run.state in ENDED_STATES)
