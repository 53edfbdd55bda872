"""The authorization matrix, cell by cell: every persona against every write and every non-public read.

Each CELL names an action of webapp.accounts.permissions.MATRIX and a request that exercises it. For each
persona the request must succeed where the matrix allows the persona, and otherwise be refused: 401 (JSON) or
a redirect to the log-in page (pages) for anonymous visitors, 403 for a signed-in role without the right.
"""

from __future__ import annotations

import itertools
import json

import pytest
from django.urls import URLPattern, URLResolver, get_resolver

from webapp.accounts.permissions import MATRIX
from webapp.accounts.roles import PERSONAS
from webapp.runs.models import Run

RUN = "matrix-run"
_n = itertools.count()


def _cmd_body():
    return json.dumps({"command": "pause", "reason": "matrix test", "id": f"matrix-{next(_n):08d}"})


# (action, method, path, body factory or None, JSON endpoint?)
CELLS = [
    ("runs.view", "get", "/", None, False),
    ("runs.view", "get", f"/runs/{RUN}/", None, False),
    ("runs.view", "get", "/api/runs/", None, True),
    ("runs.view", "get", f"/api/runs/{RUN}/", None, True),
    ("account.auth", "get", "/accounts/login/", None, False),
    ("account.auth", "get", "/accounts/signup/", None, False),
    ("account.profile", "get", "/accounts/profile/", None, False),
    ("account.profile", "post", "/accounts/profile/", lambda: {"display_name": "x"}, False),
    ("run.command", "get", f"/api/runs/{RUN}/commands/", None, True),
    ("run.command", "post", f"/api/runs/{RUN}/commands/", _cmd_body, True),
]


@pytest.fixture
def world(db, settings, redis_client):
    settings.OBS_CONTROL_KEY = b"m" * 32
    Run.objects.create(id=RUN, name=RUN)


@pytest.mark.parametrize("persona", PERSONAS)
@pytest.mark.parametrize("action,method,path,body,is_json", CELLS, ids=[f"{c[1]} {c[2]}" for c in CELLS])
def test_every_cell_of_the_matrix(world, personas, persona, action, method, path, body, is_json):
    client = personas[persona]
    kwargs = {}
    if body is not None:
        data = body()
        kwargs = {"data": data, "content_type": "application/json"} if isinstance(data, str) else {"data": data}
    resp = getattr(client, method)(path, **kwargs)
    if persona in MATRIX[action]:
        assert resp.status_code < 400, f"{persona} may {action} but got {resp.status_code}"
        if resp.status_code in (301, 302):
            assert "/accounts/login/" not in resp["Location"]
    elif persona == "anonymous":
        if is_json:
            assert resp.status_code == 401
        else:
            assert resp.status_code == 302 and resp["Location"].startswith("/accounts/login/")
    else:
        assert resp.status_code == 403, f"{persona} may not {action} but got {resp.status_code}"


def test_every_action_in_the_matrix_has_cells_in_this_test():
    assert {c[0] for c in CELLS} == set(MATRIX)


def _routes(patterns, prefix=""):
    for p in patterns:
        if isinstance(p, URLResolver):
            if p.namespace == "admin":
                continue  # Django's admin: staff-only by Django's own permissions (see permissions.py)
            yield from _routes(p.url_patterns, prefix + str(p.pattern))
        elif isinstance(p, URLPattern):
            yield prefix + str(p.pattern), p.callback


def test_every_routed_view_declares_its_matrix_action():
    undeclared = [route for route, view in _routes(get_resolver().url_patterns)
                  if getattr(view, "obs_action", None) not in MATRIX and not route.startswith("static/")]
    assert not undeclared, f"views without @public/@requires/@api_requires: {undeclared}"


def test_session_posts_need_a_csrf_token(world, personas):
    from django.test import Client

    from .conftest import make_user

    client = Client(enforce_csrf_checks=True)
    client.force_login(make_user("csrf-op", "operator"))
    resp = client.post(f"/api/runs/{RUN}/commands/", _cmd_body(), content_type="application/json")
    assert resp.status_code == 403
    assert client.post("/accounts/profile/", {"display_name": "x"}).status_code == 403
