"""Annotations fixtures: personas (signed-in test clients per role), a run with steps and a series, helpers."""

from __future__ import annotations

import json

import pytest

from observatory import contract
from webapp.annotations.models import Annotation, Reply
from webapp.metrics.models import Series
from webapp.runs.models import Run

from ..accounts.conftest import _fresh_rate_limits, make_user, personas  # noqa: F401  (fixtures)

RUN = "ann-run"
LOSS = contract.M_LOSS


@pytest.fixture
def run(db):
    r = Run.objects.create(id=RUN, name="annotated", last_step=1000)
    Series.objects.create(run=r, name=LOSS, count=1001, first_step=0, last_step=1000)
    return r


def post(client, path, body, method="post"):
    return getattr(client, method)(path, json.dumps(body), content_type="application/json")


def create(client, **fields):
    """POST a valid annotation (fields override) -> the response."""
    body = {"title": "loss spike", "body": "the **data** loader restarted", "tags": ["spike"],
            "metric": LOSS, "step_start": 100, "step_end": 120, **fields}
    return post(client, f"/api/runs/{RUN}/annotations/", body)


def annotation_by(user, **fields) -> Annotation:
    """An annotation written straight into the database (no API, no rate limit)."""
    values = {"title": "note", "body": "text", "body_html": "<p>text</p>", "step_start": 10, "step_end": 20,
              **fields}
    return Annotation.objects.create(run_id=RUN, author=user, **values)


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    """Personas are made in every test: a cheap hasher keeps that from dominating the run (nothing here logs in
    with a password)."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def matrix_annotation(run_id: str, pk: int) -> Annotation:
    """For the matrix test's world: the run gets steps, and annotation `pk` by a user who is no persona."""
    from django.contrib.auth import get_user_model

    Run.objects.filter(pk=run_id).update(last_step=100)
    author = get_user_model().objects.create_user("matrix-author", "matrix-author@example.org", "x" * 12)
    return Annotation.objects.create(pk=pk, run_id=run_id, author=author, title="matrix", body="b",
                                     body_html="<p>b</p>", step_start=10, step_end=20)


def own_posts(run_id: str, user) -> tuple[int, int]:
    """(annotation id, reply id) written by `user` (or by nobody, for the anonymous persona)."""
    a = Annotation.objects.create(run_id=run_id, author=user, title="mine", body="b", body_html="<p>b</p>",
                                  step_start=1, step_end=2)
    return a.id, Reply.objects.create(annotation=a, author=user, body="r", body_html="<p>r</p>").id
