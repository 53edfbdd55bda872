"""The push tier's subscriber check: nchan asks it (deploy/push.conf's nchan_authorize_request, through an nginx
cache) whether a WebSocket may subscribe to a run's live channels, before the socket opens.

The rule (docs/SECURITY.md "Push tier"): subscribing to a run that does not exist or is not public is refused. The
answer depends on the run alone, never on the viewer (the live channels carry public frames only, by reference), so
nginx caches it for every viewer: 10,000 sockets opening together cost one read here per cache validity.
"""

from __future__ import annotations

from django.contrib.auth.models import AnonymousUser
from django.http import HttpResponse
from django.views.decorators.http import require_GET

from observatory import contract
from webapp.accounts.permissions import can, public
from webapp.live.livelog import log_key
from webapp.redis import get_redis
from webapp.runs.models import Run


@public
@require_GET
def authorize(request, run_id: str):
    """204: the run exists (stored, or its live log holds frames: a run whose first points are on their way to the
    database) and the public (anonymous) may view it; 403: anything else. Never reads the session."""
    ok = (contract.RUN_ID_RE.match(run_id) is not None and can(AnonymousUser(), "runs.view")
          and (get_redis().exists(log_key(run_id)) or Run.objects.filter(pk=run_id).exists()))
    resp = HttpResponse(status=204 if ok else 403)
    resp["Cache-Control"] = "no-store"  # the push tier's nginx caches by its own rule (push.conf), no one else
    return resp
