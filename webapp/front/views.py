"""The front page (`/`): what is happening now, live; and /api/front/, what it refreshes from."""

from __future__ import annotations

from django.http import JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from webapp.accounts.permissions import public
from webapp.api import api_view
from webapp.front import featured
from webapp.live.relay import add_page_data
from webapp.runs import moments

MOMENTS = 12
POLL_S = 10  # moments on runs this page holds no socket for, experiments and the run's ETA refresh this often


def state() -> dict:
    """What /api/front/ answers and the page starts from: the featured run's status, moments, experiments."""
    run = featured.featured_run()
    return {"featured": featured.status(run) if run else None, "moments": moments.latest(MOMENTS),
            "experiments": featured.experiments()}


@public
@require_GET
def front(request):
    data = state()
    run = featured.featured_run()
    page = {**data, "poll_s": POLL_S, "run_id": run.id if run else None,
            "chart": featured.chart(run) if run else None}
    if run is not None:
        add_page_data(request, run, page)  # `live_push` when nchan serves the live frames
        page["last_event_id"] = run.events.order_by("-id").values_list("id", flat=True).first() or 0
    return render(request, "front/index.html", {"page": page, "run": run, **data})


@public
@api_view
def front_api(request):
    return JsonResponse(state())
