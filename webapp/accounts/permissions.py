"""The authorization matrix: one table of role × action that views, the API and WebSocket consumers consult.

Every write and every non-public read in the product names its action here; `tests/web/accounts/
test_matrix.py` walks every cell from every persona. A view declares its action with `@requires(action)`
(pages and form posts), `@api_requires(action)` (JSON), `@token_requires(action)` (machine writes with a write
token) or `@public` (a read everyone may make); a routed view with none of these fails a test, so no endpoint
slips past the matrix.
"""

from __future__ import annotations

import functools

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import JsonResponse

from webapp.accounts.models import WriteToken
from webapp.accounts.roles import ANONYMOUS, MEMBER, MODERATOR, OPERATOR, roles_of

EVERYONE = frozenset({ANONYMOUS, MEMBER, MODERATOR, OPERATOR})
SIGNED_IN = frozenset({MEMBER, MODERATOR, OPERATOR})

# action -> the personas allowed. Later features add their rows here (and their cells to the matrix test).
MATRIX: dict[str, frozenset[str]] = {
    "runs.view": EVERYONE,  # run list, dashboards, series, the live WebSocket
    "account.auth": EVERYONE,  # sign up, confirm, log in and out, password reset
    "account.profile": SIGNED_IN,  # see and edit one's own profile
    "run.failure_detail": frozenset({OPERATOR}),  # the full failure text (tracebacks, host paths)
    "ops.metrics": frozenset({OPERATOR}),  # GET /metrics with a session (a scrape uses OBS_METRICS_TOKEN instead)
    "run.command": frozenset({OPERATOR}),  # send pause, checkpoint, rollback, ... and read the command log
    "run.publish": SIGNED_IN,  # make write tokens, and publish telemetry with them to the runs in their scope
    "anomaly.acknowledge": frozenset({OPERATOR}),  # acknowledge, explain or dismiss (false alarm) an anomaly
    "annotation.create": SIGNED_IN,  # annotate a run's chart, reply in a thread
    "annotation.edit_own": SIGNED_IN,  # edit (history kept) or delete one's own annotations and replies
    "annotation.react": SIGNED_IN,  # "+1", "explains it", ... on an annotation or a reply
    "annotation.moderate": frozenset({MODERATOR, OPERATOR}),  # hide / restore annotations and replies, with a reason
    "report.create": SIGNED_IN,  # write a report (a draft until published)
    "report.edit_own": SIGNED_IN,  # edit (history kept), publish or delete one's own reports
    "report.moderate": frozenset({MODERATOR, OPERATOR}),  # hide / restore a report, with a reason
}
# The Django admin (/admin/) is outside the matrix: Django's own staff flag and model permissions guard it.


def personas_of(user) -> frozenset[str]:
    roles = roles_of(user)
    return roles if roles else frozenset({ANONYMOUS})


def can(user, action: str) -> bool:
    try:
        allowed = MATRIX[action]
    except KeyError:
        raise KeyError(f"action {action!r} is not in the authorization matrix") from None
    return bool(personas_of(user) & allowed)


def _guarded(action: str, refuse):
    """A decorator that runs the view when `can(user, action)`, else returns `refuse(request)`."""
    MATRIX[action]  # fail at import time on a typo

    def deco(view):
        @functools.wraps(view)
        def wrapper(request, *args, **kwargs):
            if can(request.user, action):
                return view(request, *args, **kwargs)
            return refuse(request)
        wrapper.obs_action = action
        return wrapper
    return deco


def requires(action: str):
    """For pages and form posts: anonymous -> the login page (302), signed in without the role -> 403."""
    def refuse(request):
        if not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        raise PermissionDenied(f"your role may not {action}")
    return _guarded(action, refuse)


def api_requires(action: str):
    """For JSON endpoints: anonymous -> 401, signed in without the role -> 403, both as JSON errors."""
    def refuse(request):
        if not request.user.is_authenticated:
            return JsonResponse({"error": "sign in required", "action": action}, status=401)
        return JsonResponse({"error": "forbidden for your role", "action": action}, status=403)
    return _guarded(action, refuse)


def bearer_secret(request) -> str:
    """The secret of an `Authorization: Bearer <secret>` header, or ""."""
    kind, _, secret = request.headers.get("Authorization", "").partition(" ")
    return secret.strip() if kind.lower() == "bearer" else ""


def token_requires(action: str):
    """For machine endpoints that authenticate with a write token (`Authorization: Bearer <secret>`), never a
    session: no, unknown or revoked token -> 401; its owner without the role, or a `run_id` outside the token's
    scope -> 403, both as JSON errors. The view finds the token on `request.write_token`, its owner on
    `request.user`."""
    MATRIX[action]

    def deco(view):
        @functools.wraps(view)
        def wrapper(request, *args, **kwargs):
            token = WriteToken.objects.for_secret(bearer_secret(request))
            if token is None:
                resp = JsonResponse({"error": "a valid write token is required (Authorization: Bearer <token>)",
                                     "action": action}, status=401)
                resp["WWW-Authenticate"] = "Bearer"
                return resp
            if not can(token.user, action):
                return JsonResponse({"error": "the token's owner may not do this", "action": action}, status=403)
            run_id = kwargs.get("run_id")
            if run_id is not None and not token.allows(run_id):
                return JsonResponse({"error": f"this token is not scoped to run {run_id!r}", "action": action},
                                    status=403)
            token.touch()
            request.write_token, request.user = token, token.user
            return view(request, *args, **kwargs)
        wrapper.obs_action = action
        return wrapper
    return deco


def public(view):
    """Marks a read that everyone may make (the matrix's `runs.view` row)."""
    view.obs_action = "runs.view"
    return view


def declare(action: str, view):
    """Wraps a view we do not own (Django's auth views) so it declares its matrix action too."""
    return requires(action)(view)
