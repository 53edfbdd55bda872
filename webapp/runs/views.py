"""Pages: the run list and a run's live dashboard (data comes from the JSON API and the WebSocket)."""

from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_GET

from observatory import contract
from webapp.runs.models import Run


@require_GET
def run_list(request):
    return render(request, "runs/run_list.html", {"runs": Run.objects.for_list()[:500]})


@require_GET
def dashboard(request, run_id: str):
    run = get_object_or_404(Run, pk=run_id)
    return render(request, "runs/dashboard.html", {
        "run": run,
        "page": {"run_id": run.id, "default_metrics": list(contract.DEFAULT_DASHBOARD_METRICS),
                 "heartbeat_ttl_s": contract.HEARTBEAT_TTL_S},
    })
