"""Reports in the public JSON API (reads; writing is the editor's form posts, docs/API.md).

    GET /api/reports/                   published reports, newest first (paginated)
    GET /api/reports/<pk>/              one report: its parts (sanitised HTML and blocks) and the runs it cites
    GET /api/reports/<pk>/revisions/    what edits replaced, oldest first
    GET /api/runs/<id>/reports/         published reports citing the run
"""

from __future__ import annotations

from django.http import JsonResponse

from webapp.accounts.permissions import public
from webapp.api import api_view, found
from webapp.pagination import page
from webapp.reports.access import moderator, visible
from webapp.reports.models import Report
from webapp.runs.api import get_run

LIST_LIMIT = 100


def _report(request, pk: int) -> Report:
    return found(visible(request.user).filter(pk=pk).first(), f"no report {pk}")


@public
@api_view
def report_list(request):
    qs = Report.objects.listed().select_related("author")
    rows, nxt = page(request, qs, ["-published_at", "-id"], LIST_LIMIT, LIST_LIMIT)
    return JsonResponse({"reports": [r.summary_json() for r in rows], "next": nxt})


@public
@api_view
def report_detail(request, pk: int):
    return JsonResponse(_report(request, pk).as_json(moderator(request.user)))


@public
@api_view
def report_revisions(request, pk: int):
    report = _report(request, pk)
    return JsonResponse({"report": report.id, "revisions": [r.as_json() for r in report.revisions.order_by("id")]})


@public
@api_view
def run_reports(request, run_id: str):
    run = get_run(run_id)
    qs = Report.objects.listed().filter(runs=run).select_related("author")
    rows, nxt = page(request, qs, ["-published_at", "-id"], LIST_LIMIT, LIST_LIMIT)
    return JsonResponse({"run": run.id, "reports": [r.summary_json() for r in rows], "next": nxt})
