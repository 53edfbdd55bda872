"""Compare runs: the page `/compare/?runs=a,b,c&chart=…&x=…&smooth=…&log=…&logx=1&from=…&to=…` (the URL holds
the whole view; static/js/compare.js draws it) and the one read it needs besides each run's series API:

GET /api/compare/?runs=a,b,c (or runs=a&runs=b) -> {"runs": [{summary…, "started", "time_anchors", "rewinds",
"metrics": [{name, count, first_step, last_step}]}], "tokens_metric"}, in the order asked for. Each run's series
names (the page's metric picker offers their union) and its x axes: tokens come from its `tokens_metric` series,
wall time from its (step, time) anchors, relative to `started`. A malformed id or too many runs: 400; runs that
do not exist: 404 naming them in `missing`.
"""

from __future__ import annotations

from collections import defaultdict

from django.http import JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from observatory import contract
from webapp.accounts.permissions import public
from webapp.api import ApiError, api_view
from webapp.metrics.models import Series
from webapp.runs import pagedata
from webapp.runs.models import Run

MAX_RUNS = 12  # lines per chart: beyond this a comparison is unreadable (and the palette repeats)
DEFAULT_CHARTS = [contract.M_LOSS]


def run_ids(request) -> list[str]:
    """The `runs` parameter ("a,b,c", repeated, or both) as distinct ids in order; 400 for a malformed one."""
    ids = [part.strip() for value in request.GET.getlist("runs") for part in value.split(",") if part.strip()]
    ids = list(dict.fromkeys(ids))
    for rid in ids:
        if not contract.RUN_ID_RE.match(rid):
            raise ApiError(400, f"parameter 'runs': {rid[:80]!r} is not a run id", parameter="runs")
    if len(ids) > MAX_RUNS:
        raise ApiError(400, f"parameter 'runs' names {len(ids)} runs; at most {MAX_RUNS} compare at once",
                       parameter="runs")
    return ids


def _entry(run: Run, metrics: list[dict]) -> dict:
    started = pagedata.first_started(run)
    return {**run.summary(), "started": started.isoformat() if started else None,
            "time_anchors": pagedata.time_anchors(run), "rewinds": pagedata.rewinds(run), "metrics": metrics}


@public
@api_view
def compare_runs(request):
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


@public
@require_GET
def compare_page(request):
    """The page itself never fails on its query: the script reads /api/compare/ and says what is wrong."""
    return render(request, "metrics/compare.html", {"page": {
        "registry": contract.registry(), "tokens_metric": contract.M_TOTAL_TOKENS,
        "default_charts": DEFAULT_CHARTS, "max_runs": MAX_RUNS}})
