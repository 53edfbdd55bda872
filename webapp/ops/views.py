"""GET /healthz: 200 {"status": "ok", ...} when the database and Redis answer, else 503 with what failed (load
balancers, Kubernetes readiness and liveness probes). GET /metrics: Prometheus text exposition of this process
(WebSocket clients, frames sent, push delay: webapp.live registers them) and of what Redis says about ingest (lag,
points, dead letters). /metrics answers operators (a session) and scrapes with `Authorization: Bearer
<OBS_METRICS_TOKEN>` (Prometheus' `authorization` setting); others get 401/403. Neither answer names a host, a
pid or a path: /healthz gives a failing dependency's error class only (the full error goes to the log), /metrics
labels processes by replica id."""

from __future__ import annotations

import functools
import hmac
import logging
import time

from django.conf import settings
from django.http import HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from webapp.accounts.permissions import bearer_secret, can, public
from webapp.ops import exposition, probes

log = logging.getLogger("observatory.ops")
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
STARTED = time.time()


@public
@require_GET
@never_cache
def healthz(request):
    db = probes.check_database()
    r = probes.client()
    rd = probes.check_redis(r)
    lag = probes.lag_health(r) if rd is None else "unknown (no Redis)"
    body = {"status": "ok" if db is None and rd is None else "unavailable",
            "database": _public_error("database", db), "redis": _public_error("redis", rd), "ingest_lag": lag}
    # no uptime: when a process last restarted is for operators (/metrics' start time), not the public
    for check in exposition.health_checks:  # e.g. the live path's lag, apart from ingest's
        try:
            body.update(check())
        except Exception as e:
            log.warning("healthz: %s failed: %s", getattr(check, "__qualname__", check), e)
    return JsonResponse(body, status=200 if body["status"] == "ok" else 503)


def _public_error(what: str, error: str | None) -> str:
    """"ok", or "unavailable (<error class>)": the message itself (host, port, path) goes to the log only."""
    if error is None:
        return "ok"
    log.warning("healthz: %s unavailable: %s", what, error)
    return f"unavailable ({error.split(':', 1)[0]})"


def _scrape_token_ok(request) -> bool:
    token = settings.OBS_METRICS_TOKEN
    return bool(token) and hmac.compare_digest(bearer_secret(request).encode(), token.encode())


def operator_or_scrape_token(view):
    """Operators (session) or `Authorization: Bearer <OBS_METRICS_TOKEN>`; else 401 (no or a wrong token, not
    signed in) or 403 (signed in without the role), as JSON errors."""
    @functools.wraps(view)
    def wrapper(request, *args, **kwargs):
        if _scrape_token_ok(request) or can(request.user, "ops.metrics"):
            return view(request, *args, **kwargs)
        if request.user.is_authenticated and not bearer_secret(request):
            return JsonResponse({"error": "forbidden for your role", "action": "ops.metrics"}, status=403)
        resp = JsonResponse({"error": "operators only, or a scrape with Authorization: Bearer <OBS_METRICS_TOKEN>",
                             "action": "ops.metrics"}, status=401)
        resp["WWW-Authenticate"] = "Bearer"
        return resp
    wrapper.obs_action = "ops.metrics"
    return wrapper


@operator_or_scrape_token
@require_GET
@never_cache
def metrics(request):
    fams = [exposition.Family("observatory_process_start_time_seconds", "gauge",
                              "when this web process started").add(round(STARTED, 3)),
            exposition.Family("observatory_database_up", "gauge", "1 when the database answered this scrape")
            .add(1 if probes.check_database() is None else 0)]
    fams += probes.redis_families(probes.client())
    for collect in exposition.collectors:
        fams += list(collect())
    fams = exposition.without_process_names(fams, settings.SECRET_KEY)
    return HttpResponse(exposition.render(fams), content_type=CONTENT_TYPE)
