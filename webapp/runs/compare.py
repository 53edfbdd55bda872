"""Compare runs: the page `/compare/?runs=a,b,c&chart=…&x=…&smooth=…&log=…&logx=1&from=…&to=…` (the URL holds
the whole view; static/js/compare.js draws it from each run's series API and /api/compare/, webapp.metrics.api).
"""

from __future__ import annotations

from django.shortcuts import render
from django.views.decorators.http import require_GET

from observatory import contract
from webapp.accounts.permissions import public
from webapp.api import ApiError

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


@public
@require_GET
def compare_page(request):
    """The page itself never fails on its query: the script reads /api/compare/ and says what is wrong."""
    return render(request, "runs/compare.html", {"page": {
        "registry": contract.registry(), "tokens_metric": contract.M_TOTAL_TOKENS,
        "default_charts": DEFAULT_CHARTS, "max_runs": MAX_RUNS}})
