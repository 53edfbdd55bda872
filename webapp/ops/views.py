"""GET /healthz: 200 {"status": "ok", ...} when the database and Redis answer, else 503 with what failed (load
balancers, Kubernetes readiness and liveness probes). GET /metrics: Prometheus text exposition of this process
(WebSocket clients, frames sent, push delay: webapp.live registers them) and of what Redis says about ingest (lag,
points, dead letters). /metrics is public unless OBS_METRICS_TOKEN is set; then it wants
`Authorization: Bearer <token>` (Prometheus' `authorization` scrape setting)."""

from __future__ import annotations

import hmac
import os
import time

from django.http import HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from webapp.accounts.permissions import bearer_secret, public
from webapp.ops import exposition, probes

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
STARTED = time.time()


@public
@require_GET
@never_cache
def healthz(request):
    db = probes.check_database()
    r = probes.client()
    try:
        rd = probes.check_redis(r)
        lag = probes.lag_health(r) if rd is None else "unknown (no Redis)"
    finally:
        r.close()
    body = {"status": "ok" if db is None and rd is None else "unavailable",
            "database": db or "ok", "redis": rd or "ok", "ingest_lag": lag, "uptime_s": round(time.time() - STARTED, 1)}
    return JsonResponse(body, status=200 if body["status"] == "ok" else 503)


@public  # a read of operational numbers; a deployment that wants them private sets OBS_METRICS_TOKEN
@require_GET
@never_cache
def metrics(request):
    token = os.environ.get("OBS_METRICS_TOKEN", "")
    if token and not hmac.compare_digest(bearer_secret(request).encode(), token.encode()):
        resp = JsonResponse({"error": "this endpoint wants Authorization: Bearer <OBS_METRICS_TOKEN>"}, status=401)
        resp["WWW-Authenticate"] = "Bearer"
        return resp
    fams = [exposition.Family("observatory_process_start_time_seconds", "gauge",
                              "when this web process started").add(round(STARTED, 3)),
            exposition.Family("observatory_database_up", "gauge", "1 when the database answered this scrape")
            .add(1 if probes.check_database() is None else 0)]
    r = probes.client()
    try:
        fams += probes.redis_families(r)
    finally:
        r.close()
    for collect in exposition.collectors:
        fams += list(collect())
    return HttpResponse(exposition.render(fams), content_type=CONTENT_TYPE)
