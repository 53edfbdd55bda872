"""Pages: the run list and a run's live dashboard (data comes from the JSON API and the WebSocket)."""

from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_GET

from observatory import contract
from webapp.accounts.permissions import public
from webapp.runs.models import Run

# The dashboard's default line charts. `metrics` are always drawn; `optional` ones join as extra traces once the
# run has them; `extra_prefix`: every series named <prefix><one segment> joins too (per-domain losses);
# `secondary`: drawn against a right-hand axis.
DASHBOARD_CHARTS = (
    {"title": "loss", "metrics": [contract.M_LOSS], "optional": [contract.M_CE],
     "extra_prefix": contract.domain_loss("")},
    {"title": "learning rate", "metrics": [contract.M_LR]},
    {"title": "grad norm", "metrics": [contract.M_GRAD_NORM]},
    {"title": "tokens/s · MFU", "metrics": [contract.M_TOKENS_PER_S], "optional": [contract.M_MFU],
     "secondary": [contract.M_MFU]},
    {"title": "MoE drop fraction", "metrics": [contract.M_DROP]},
)


@public
@require_GET
def run_list(request):
    return render(request, "runs/run_list.html", {"runs": Run.objects.for_list()[:500]})


@public
@require_GET
def dashboard(request, run_id: str):
    run = get_object_or_404(Run, pk=run_id)
    return render(request, "runs/dashboard.html", {
        "run": run,
        "page": {"run_id": run.id, "default_metrics": list(contract.DEFAULT_DASHBOARD_METRICS),
                 "heartbeat_ttl_s": contract.HEARTBEAT_TTL_S,
                 "charts": list(DASHBOARD_CHARTS),
                 # "train/router/layer_{layer}/{name}"; expert e of routing_hist is "<...>/routing_hist/{e}"
                 "router_metric": contract.ROUTER_METRIC,
                 "mixture": {"stage": contract.M_MIX_STAGE, "weight_prefix": contract.mixture_weight("")}},
    })
