"""The authorization matrix, method by method: every routed view, each HTTP method it accepts and the matrix
action that method needs, from every persona (the world and its cells: test_matrix.py)."""

from __future__ import annotations

import re

import pytest
from django.urls import get_resolver

from webapp.accounts.permissions import MATRIX
from webapp.accounts.roles import PERSONAS

from .conftest import make_user
from .test_matrix import ANNOTATION, ANOMALY, REPORT, RUN, _fast_passwords, _routes, world  # noqa: F401 (fixtures)

# ---------------------------------------------------------------------------------------------- method by method
# Every routed view, each HTTP method it accepts and the matrix action that method needs. A method a route does
# not list must be refused (405, or the view's guard refusing the persona first); a route missing here fails
# test_every_route_is_in_the_method_table. TOKEN: machine writes with a write token, never a session (401 for
# every persona here; the token side is test_run_publish_through_the_intake_from_every_persona).
TOKEN = "token"
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
# allowed personas may still be refused (403) what is not theirs
OWN_ACTIONS = {"annotation.edit_own", "report.edit_own"}
R, AUTH = {"GET": "runs.view"}, {"GET": "account.auth", "POST": "account.auth"}
ROUTE_METHODS = {
    "accounts/signup/": AUTH,
    "accounts/confirm/<str:uidb64>/<str:token>/": {"GET": "account.auth"},
    "accounts/profile/": {"GET": "account.profile", "POST": "account.profile"},
    "accounts/tokens/": {"POST": "run.publish"},
    "accounts/tokens/<int:token_id>/revoke/": {"POST": "account.profile"},
    "accounts/login/": AUTH,
    "accounts/logout/": {"POST": "account.auth"},
    "accounts/password_reset/": AUTH,
    "accounts/password_reset/done/": {"GET": "account.auth"},
    "accounts/reset/<uidb64>/<token>/": AUTH,
    "accounts/reset/done/": {"GET": "account.auth"},
    "api/runs/<str:run_id>/telemetry/": {"POST": TOKEN},
    "live/authorize/<str:run_id>/": R,  # the push tier's subscriber check (webapp/live/views.py)
    "": R,
    "runs/": R,
    "api/front/": R,
    "runs/<str:run_id>/preview.png": R,
    "annotations/<int:pk>/preview.png": R,
    "annotations/<int:pk>/thread/": R,
    "runs/<str:run_id>/": R,
    "api/runs/": R,
    "api/runs/<str:run_id>/": R,
    "compare/": R,
    "api/compare/": R,
    "api/runs/<str:run_id>/metrics/": R,
    "api/runs/<str:run_id>/windows/": R,
    "api/runs/<str:run_id>/metrics/<path:name>/": R,
    "runs/<str:run_id>/anomalies/": R,
    "runs/<str:run_id>/anomalies/<int:pk>/triage/": {"POST": "anomaly.acknowledge"},
    "api/runs/<str:run_id>/anomalies/": R,
    "api/runs/<str:run_id>/anomalies/<int:pk>/": {"POST": "anomaly.acknowledge"},
    "experiments/": R,
    "experiments/<path:name>/": R,
    "api/runs/<str:run_id>/forecast/": R,
    "api/runs/<str:run_id>/annotations/": {"GET": "runs.view", "POST": "annotation.create"},
    "api/annotations/<int:pk>/": {"GET": "runs.view", "PATCH": "annotation.edit_own", "DELETE": "annotation.edit_own"},
    "api/annotations/<int:pk>/revisions/": R,
    "api/annotations/<int:pk>/replies/": {"GET": "runs.view", "POST": "annotation.create"},
    "api/annotations/<int:pk>/reactions/": {"POST": "annotation.react"},
    "api/annotations/<int:pk>/moderation/": {"POST": "annotation.moderate"},
    "api/replies/<int:pk>/": {"PATCH": "annotation.edit_own", "DELETE": "annotation.edit_own"},
    "api/replies/<int:pk>/revisions/": R,
    "api/replies/<int:pk>/reactions/": {"POST": "annotation.react"},
    "api/replies/<int:pk>/moderation/": {"POST": "annotation.moderate"},
    "operate/": {"GET": "run.command"},
    "runs/<str:run_id>/log/": R,
    "api/operate/": {"GET": "run.command"},
    "api/runs/<str:run_id>/commands/": {"GET": "run.command", "POST": "run.command"},
    "api/runs/<str:run_id>/plan/": {"GET": "run.command"},
    "api/runs/<str:run_id>/interventions/": R,
    "healthz": R,
    "favicon.ico": R,
    "metrics": {"GET": "ops.metrics"},
    "api/schema/": R,
    "api/docs/": R,
    "api/runs/<str:run_id>/events/": R,
    "api/runs/<str:run_id>/export.csv": R,
    "api/runs/<str:run_id>/export.json": R,
    "api/runs/<str:run_id>/export.parquet": R,
    "api/runs/<str:run_id>/records.json": R,
    "reports/": R,
    "reports/new/": {"GET": "report.create", "POST": "report.create"},
    "reports/<int:pk>/": R,
    "reports/<int:pk>/edit/": {"GET": "report.edit_own", "POST": "report.edit_own"},
    "reports/<int:pk>/publish/": {"POST": "report.edit_own"},
    "reports/<int:pk>/delete/": {"POST": "report.edit_own"},
    "reports/<int:pk>/moderation/": {"POST": "report.moderate"},
    "reports/<int:pk>/history/": R,
    "embed/runs/<str:run_id>/chart/": R,
    "oembed": R,
    "api/reports/": R,
    "api/reports/<int:pk>/": R,
    "api/reports/<int:pk>/revisions/": R,
    "api/runs/<str:run_id>/reports/": R,
}
REPLY = 4444  # a reply to ANNOTATION by its author (no persona)


def _sample_url(route: str) -> str:
    """A concrete URL of a route pattern, naming the world's objects."""
    pk = (ANOMALY if "anomalies" in route else REPLY if route.startswith("api/replies/")
          else REPORT if "reports/" in route else ANNOTATION)
    values = {"run_id": RUN, "pk": pk, "name": "matrix-exp" if route.startswith("experiments/") else "train/loss",
              "token_id": 999_999, "uidb64": "MQ", "token": "set-password"}
    return "/" + re.sub(r"<(?:\w+:)?(\w+)>", lambda m: str(values[m.group(1)]), route)


def _refused(resp) -> bool:
    if resp.status_code in (401, 403):
        return True
    return resp.status_code == 302 and resp["Location"].startswith("/accounts/login/")


def test_every_route_is_in_the_method_table():
    routes = {route for route, _ in _routes(get_resolver().url_patterns) if not route.startswith("static/")}
    assert routes == set(ROUTE_METHODS), (f"missing: {sorted(routes - set(ROUTE_METHODS))}, "
                                          f"gone: {sorted(set(ROUTE_METHODS) - routes)}")


@pytest.mark.parametrize("route", sorted(ROUTE_METHODS), ids=lambda r: r or "/")
def test_every_method_of_every_route_from_every_persona(world, route):
    """Each of GET/POST/PUT/PATCH/DELETE as each persona: what the table allows answers (a 4xx of the request's
    own making is fine, never 401/403/405/5xx); the rest is refused (401/403/login) or 405."""
    from django.contrib.auth import get_user_model
    from django.test import Client

    from webapp.annotations.models import Reply

    Reply.objects.get_or_create(pk=REPLY, defaults={"annotation_id": ANNOTATION, "body": "r", "body_html": "<p>r</p>",
                                                    "author": get_user_model().objects.get(username="matrix-author")})
    users = {role: make_user(f"{role}-methods", role) for role in PERSONAS if role != "anonymous"}
    url, wrong = _sample_url(route), []
    # A fresh client (its own cookies) for every request, all on one handler, as a server's requests share one
    # middleware chain: each handler loads its own, and WhiteNoise's scans every static file (most of this file's
    # CPU when each of the ~35 clients per route loaded one).
    handler = Client().handler
    for persona in PERSONAS:
        for method in METHODS:
            client = Client()
            client.handler = handler
            if persona in users:
                client.force_login(users[persona])
            kwargs = {"data": "{}", "content_type": "application/json"} if method in ("POST", "PUT", "PATCH") else {}
            resp = client.generic(method, url, **kwargs)
            action = ROUTE_METHODS[route].get(method)
            if action == TOKEN:
                ok = resp.status_code == 401
            elif action is None:
                ok = resp.status_code == 405 or _refused(resp)
            elif persona in MATRIX[action]:
                ok = resp.status_code < 500 and resp.status_code not in (401, 405) and not (
                    _refused(resp) and not (action in OWN_ACTIONS and resp.status_code == 403))
            else:
                ok = _refused(resp)
            if not ok:
                wrong.append(f"{method} {url} as {persona}: {resp.status_code} (table: {action or 'not accepted'})")
    assert not wrong, "\n".join(wrong)
