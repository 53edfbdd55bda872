"""Pages: a run's anomaly log (/runs/<id>/anomalies/, public, filterable) and its triage form post (operators)."""

from __future__ import annotations

from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST
from django_ratelimit.decorators import ratelimit

from observatory.anomalies import SEVERITIES
from webapp.accounts.permissions import can, public, requires
from webapp.anomalies import filters
from webapp.anomalies.models import STATUSES, Anomaly, TriageError
from webapp.runs.models import Run

TRIAGE = "anomaly.acknowledge"


def _page(request, run: Run, f: dict | None, error: str = "", status: int = 200):
    rows = list(filters.select(run.id, f)) if f is not None else []
    kinds = sorted(set(Anomaly.objects.filter(run=run).values_list("kind", flat=True).distinct()))
    return render(request, "anomalies/log.html", {
        "run": run, "rows": rows, "filters": f or {}, "error": error, "kinds": kinds, "severities": SEVERITIES,
        "statuses": [(s, s.replace("_", " ")) for s in STATUSES], "can_triage": can(request.user, TRIAGE),
        "total": Anomaly.objects.filter(run=run, superseded=False).count(),
    }, status=status)


@public
@require_GET
def anomaly_log(request, run_id: str):
    run = get_object_or_404(Run, pk=run_id)
    try:
        f = filters.parse(request.GET)
    except filters.FilterError as e:
        return _page(request, run, None, error=str(e), status=400)
    return _page(request, run, f)


@requires(TRIAGE)
@require_POST
@ratelimit(key="user_or_ip", rate="60/m", method="POST", block=True)
def anomaly_triage(request, run_id: str, pk: int):
    run = get_object_or_404(Run, pk=run_id)
    a = get_object_or_404(Anomaly, run=run, pk=pk)
    try:
        a.triage(request.POST.get("action"), request.user, request.POST.get("note", ""))
    except TriageError as e:
        return _page(request, run, filters.parse({}), error=f"anomaly {a.id}: {e}", status=e.status)
    a.save()
    return redirect(f"{reverse('run-anomalies', args=[run.id])}#a-{a.id}")
