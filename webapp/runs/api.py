"""JSON API for runs: GET /api/runs/ and GET /api/runs/<id>/."""

from django.http import JsonResponse

from webapp.accounts.permissions import can, public
from webapp.api import api_view, found
from webapp.pagination import page
from webapp.runs.models import Run


def get_run(run_id: str) -> Run:
    return found(Run.objects.filter(pk=run_id).first(), f"run {run_id!r} not found")


@public
@api_view
def runs(request):
    """Newest activity first; `?limit=` (default 200) and `?cursor=` from the previous answer's `next`."""
    rows, nxt = page(request, Run.objects.all(), ["-updated_at", "-id"], 200, 1000)
    return JsonResponse({"runs": [r.summary() for r in rows], "next": nxt})


@public
@api_view
def run_detail(request, run_id: str):
    """Public; operators (`run.failure_detail`) also get host paths and the full failure text."""
    return JsonResponse(detail_payload(request, get_run(run_id)))


def detail_payload(request, run: Run) -> dict:
    """The body of GET /api/runs/<id>/ for this request's user (also inlined into the dashboard page)."""
    full = can(request.user, "run.failure_detail")
    events = [e.as_dict(full) for e in reversed(run.events.order_by("-id")[:200])]
    return {**run.detail(full), "events": events, "full_detail": full}
