"""POST /api/runs/<run id>/telemetry/: a training loop without Redis access publishes through the site."""

from __future__ import annotations

import hashlib

import redis
from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
from django_ratelimit.decorators import ratelimit

from observatory import contract
from webapp.accounts.permissions import bearer_secret, token_requires
from webapp.api import ApiError
from webapp.intake.batch import read_entries, write_entries
from webapp.intake.models import RunClaim
from webapp.redis import get_redis

# Per token: the client sends at most ~4 requests/s (it lingers 0.25 s to fill a batch of up to 1,000 messages).
INTAKE_RATE = "600/m"


def _rate_key(group, request) -> str:
    secret = bearer_secret(request)
    if secret:
        return "token:" + hashlib.sha256(secret.encode()).hexdigest()[:32]
    return "ip:" + request.META.get("REMOTE_ADDR", "")


@csrf_exempt  # a bearer-token API: no cookies, so nothing for a forged cross-site request to ride on
@require_POST
@ratelimit(key=_rate_key, rate=lambda group, request: INTAKE_RATE, block=True)
@token_requires("run.publish")
def telemetry(request, run_id: str):
    try:
        entries = read_entries(request, run_id)
        client = get_redis()
        if not RunClaim.may_write(run_id, request.user,
                                  lambda: bool(client.sismember(contract.RUNS_KEY, run_id))):
            raise ApiError(403, f"run {run_id!r} belongs to another publisher: choose another run id")
        if entries:
            write_entries(client, run_id, entries)
    except ApiError as e:
        return JsonResponse({"error": e.message, **e.extra}, status=e.status)
    except redis.RedisError:
        return JsonResponse({"error": "the telemetry store is unavailable; retry later"}, status=503)
    return JsonResponse({"run_id": run_id, "accepted": len(entries)}, status=202)
