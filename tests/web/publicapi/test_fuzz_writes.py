"""The schema fuzz pass as a signed-in user who holds every role (member, moderator, operator), so that generated
bodies reach the write validators rather than stopping at 401/403: every write operation of /api/schema/ (annotations,
replies, reactions, moderation, triage, commands) plus the telemetry intake with a write token. In about half the
examples one string of the generated body (a value or an object key) is replaced by text holding a lone UTF-16
surrogate. No answer may be a 5xx; each operation must have reached its validators (some 4xx other than 401/403/404)
or succeeded. OBS_FUZZ_WRITE_EXAMPLES examples per operation (default 12)."""

from __future__ import annotations

import copy
import json
import os
import time

import pytest
import requests
import schemathesis
from django.middleware.csrf import _get_new_csrf_string
from django.test import Client
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error

from webapp.accounts.models import WriteToken
from webapp.annotations.models import Annotation, Reply
from webapp.publicapi import openapi

from ..accounts.conftest import make_user
from .test_fuzz import fuzz_run  # noqa: F401  (fixture)

EXAMPLES = int(os.environ.get("OBS_FUZZ_WRITE_EXAMPLES", "12"))
LONE = st.text(alphabet=st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1, max_size=3)
BAD_TEXT = st.builds(lambda a, s, b: a + s + b, st.text(max_size=5), LONE, st.text(max_size=5))


def _strings(obj, path=()):
    """Paths to every string value and object key in a decoded JSON body."""
    if isinstance(obj, str):
        yield path, "value"
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield (*path, k), "key"
            yield from _strings(v, (*path, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _strings(v, (*path, i))


def _spoil(body, data):
    """The body with one string (value or key) replaced by text holding a lone surrogate, or a new field of it."""
    body = copy.deepcopy(body)
    spots = list(_strings(body))
    bad = data.draw(BAD_TEXT)
    if not spots:
        body["title"] = bad
        return body
    path, kind = data.draw(st.sampled_from(spots))
    parent = body
    for p in path[:-1]:
        parent = parent[p]
    if kind == "key":
        parent[bad] = parent.pop(path[-1])
    else:
        parent[path[-1]] = bad
    return body


def _bare(doc: dict) -> dict:
    """A copy without security schemes: the fuzzer would otherwise make up a `sessionid` cookie of its own."""
    doc = copy.deepcopy(doc)
    doc["components"].pop("securitySchemes", None)
    for ops in doc["paths"].values():
        for op in ops.values():
            op.pop("security", None)
    return doc


def _pin(param: dict, pk: int | None) -> dict:
    if pk is not None:
        return {**param, "schema": {"type": "integer", "enum": [pk]}}
    if param["name"] == "run_id" and param["in"] == "path":  # the run fuzz_run made: its writes, not 404s
        return {**param, "schema": {"type": "string", "enum": [param["example"]]}}
    return param


def _pinned(doc: dict, ids: dict[str, int]) -> dict:
    """The document with each {pk} pinned to a real object of its kind and each {run_id} to the fixture's run
    (random ones would only ever find 404)."""
    doc = _bare(doc)
    for path, ops in doc["paths"].items():
        kind = next((k for k in ids if path.startswith(f"/{k}/") or f"/{k}/{{pk}}" in path), None)
        for op in ops.values():  # new parameter objects: the document shares one PK parameter between paths
            op["parameters"] = [_pin(p, ids[kind] if p["name"] == "pk" and kind else None)
                                for p in op.get("parameters", [])]
    return doc


@pytest.fixture
def world(fuzz_run, settings):
    settings.RATELIMIT_ENABLE = False  # the limits are tested elsewhere: here every example must reach the view
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    from webapp.anomalies.models import Anomaly

    user = make_user("fuzz-all", "member", "moderator", "operator")
    a = Annotation.objects.create(run=fuzz_run, author=user, title="t", body="b", body_html="<p>b</p>",
                                  step_start=1, step_end=2)
    r = Reply.objects.create(annotation=a, author=user, body="r", body_html="<p>r</p>")
    c = Client()
    c.force_login(user)
    csrf = _get_new_csrf_string()
    session = requests.Session()
    session.cookies.set("sessionid", c.cookies["sessionid"].value)
    session.cookies.set("csrftoken", csrf)
    session.headers["X-CSRFToken"] = csrf
    return {"session": session, "user": user, "ids": {"annotations": a.id, "replies": r.id,
                                                      "anomalies": Anomaly.objects.get().id}}


def _fuzz_writes(doc: dict, base: str, session, only=None) -> tuple[dict, list[str], int, int]:
    """({operation: statuses}, failures, examples, spoiled examples) over the document's write operations."""
    schema = schemathesis.openapi.from_dict(doc)
    seen: dict[str, list[int]] = {}
    failures: list[str] = []
    counts = [0, 0]
    operations = sorted((r.ok() for r in schema.get_all_operations()),
                        key=lambda o: (o.method.upper() == "DELETE", "moderation" in o.path))
    for operation in operations:  # hiding and deleting last: the rest find their annotation and reply public
        if operation.method.upper() in ("GET", "HEAD") or (only and not only(operation)):
            continue
        statuses = seen.setdefault(operation.label, [])

        @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                  phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
        @given(case=operation.as_strategy(), data=st.data())
        def fuzz(case, data):
            counts[0] += 1
            kwargs = case.as_transport_kwargs(base_url=base)
            if "json" in kwargs:  # as a browser's JSON.stringify sends it: a lone surrogate as its \\uXXXX escape
                body = kwargs.pop("json")
                if isinstance(body, dict) and data.draw(st.booleans()):
                    body = _spoil(body, data)
                    counts[1] += 1
                kwargs["data"] = json.dumps(body).encode()
                kwargs["headers"] = {**kwargs.get("headers", {}), "Content-Type": "application/json"}
            resp = session.request(**kwargs)
            statuses.append(resp.status_code)
            case.validate_response(resp, checks=[not_a_server_error], transport_kwargs=kwargs)

        try:
            fuzz()
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as e:  # noqa: BLE001  (schemathesis raises failure groups; collect every one)
            failures.append(f"{operation.label}: {str(e)[:1500]}")
    return seen, failures, counts[0], counts[1]


def _reached(statuses: list[int]) -> bool:
    return any(s < 300 or s in (400, 409, 413) for s in statuses)


def test_every_write_operation_as_a_signed_in_user_never_answers_5xx(live_server, world):
    t0 = time.perf_counter()
    seen, failures, n, spoiled = _fuzz_writes(_pinned(openapi.document(), world["ids"]),
                                              live_server.url + "/api/v1", world["session"],
                                              only=lambda op: "telemetry" not in op.path)
    took = time.perf_counter() - t0
    print(f"write fuzz: {len(seen)} operations, {n} examples ({spoiled} with a lone surrogate), {took:.1f} s",
          {label: sorted(set(s)) for label, s in seen.items()})
    assert not failures, "\n\n".join(failures)
    assert len(seen) >= 12 and spoiled >= n // 4
    unreached = sorted(label for label, statuses in seen.items() if not _reached(statuses))
    assert not unreached, {label: sorted(set(seen[label])) for label in unreached}


def test_the_telemetry_intake_with_a_write_token_never_answers_5xx(live_server, world):
    secret = WriteToken.issue(world["user"], "fuzz", ["fuzz-*"])[1]
    doc = _bare(openapi.document())
    op = doc["paths"]["/runs/{run_id}/telemetry/"]["post"]
    op["parameters"] = [{**p, "schema": {"type": "string", "enum": ["fuzz-intake"]}} if p["name"] == "run_id" else p
                        for p in op["parameters"]]
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {secret}"
    seen, failures, n, spoiled = _fuzz_writes(doc, live_server.url + "/api/v1", session,
                                              only=lambda o: "telemetry" in o.path)
    print(f"intake fuzz: {n} examples ({spoiled} with a lone surrogate)", seen)
    assert not failures, "\n\n".join(failures)
    assert n >= EXAMPLES // 2 and all(_reached(s) for s in seen.values()), seen


def test_the_write_fuzzer_catches_a_5xx(live_server, world, monkeypatch):
    """It can fail: without the edge check, the first encoder a surrogate meets (nh3, the database, Redis) raises:
    here, one in front of every JSON write."""
    def unguarded(obj, path=""):
        json.dumps(obj, ensure_ascii=False).encode()

    monkeypatch.setattr("webapp.api.well_formed", unguarded)
    _, failures, _, _ = _fuzz_writes(_pinned(openapi.document(), world["ids"]), live_server.url + "/api/v1",
                                     world["session"], only=lambda o: o.label == "POST /runs/{run_id}/annotations/")
    assert failures and "500" in failures[0], failures
