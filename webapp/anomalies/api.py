"""JSON API: GET /api/runs/<id>/anomalies/ (public) and POST /api/runs/<id>/anomalies/<pk>/ (triage, operators)."""

from __future__ import annotations

import json

from django.http import JsonResponse
from django.views.decorators.http import require_POST
from django_ratelimit.decorators import ratelimit

from webapp.accounts.permissions import api_requires, can, public
from webapp.anomalies import filters
from webapp.anomalies.models import Anomaly, TriageError
from webapp.api import ApiError, api_view, well_formed
from webapp.pagination import page
from webapp.runs.api import get_run

TRIAGE = "anomaly.acknowledge"
MAX_BODY_BYTES = 8 * 1024


@public
@api_view
def anomaly_list(request, run_id: str):
    run = get_run(run_id)
    try:
        f = filters.parse(request.GET)
    except filters.FilterError as e:
        raise ApiError(400, str(e)) from None
    who = can(request.user, TRIAGE)
    items, nxt = page(request, filters.query(run.id, f), ["-start_step", "-id"], 0, 0, limit_param=f["limit"])
    rows = [a.as_json(who) for a in items]
    return JsonResponse({"run_id": run.id, "count": len(rows), "anomalies": rows, "next": nxt,
                         "filters": {k: f[k] for k in ("kind", "severity", "status", "superseded")}})


@api_requires(TRIAGE)
@require_POST
@ratelimit(key="user_or_ip", rate="60/m", method="POST", block=True)
def anomaly_triage(request, run_id: str, pk: int):
    """{"action": "acknowledge" | "explain" | "false_alarm", "note": "why"} -> the updated record."""
    a = Anomaly.objects.filter(run_id=run_id, pk=pk).first()
    if a is None:
        return JsonResponse({"error": f"no anomaly {pk} in run {run_id!r}"}, status=404)
    if len(request.body) > MAX_BODY_BYTES:
        return JsonResponse({"error": f"body larger than {MAX_BODY_BYTES} bytes"}, status=413)
    try:
        body = json.loads(request.body or b"{}")
    except (ValueError, RecursionError):
        body = None
    if not isinstance(body, dict):
        return JsonResponse({"error": "body must be a JSON object"}, status=400)
    try:
        well_formed(body)
    except ApiError as e:
        return JsonResponse({"error": e.message, **e.extra}, status=e.status)
    try:
        a.triage(body.get("action"), request.user, body.get("note", ""))
    except TriageError as e:
        return JsonResponse({"error": str(e)}, status=e.status)
    a.save()
    return JsonResponse(a.as_json(who=True))
