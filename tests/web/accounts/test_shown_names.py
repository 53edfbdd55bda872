"""Pages and records name people by their display name, never their login name (QA, issue 46: the operator panel
said "signed in as <login name>"; the anomaly log, its triage answer, a moderator's record and the public Grafana
export named people by login name too). A login name is half a credential."""

from __future__ import annotations

import json

import pytest
from django.core.cache import cache
from django.test import Client

from webapp.accounts.models import Profile
from webapp.annotations.models import Annotation
from webapp.anomalies.models import Anomaly
from webapp.runs.models import Run

from .conftest import make_user

pytestmark = pytest.mark.django_db
RUN = "names-run"
LOGIN, SHOWN = "login-olga-7", "Olga Petrova"


@pytest.fixture
def olga(db):
    cache.clear()  # rate-limit counters
    Run.objects.create(id=RUN, name="names", last_step=1000)
    user = make_user(LOGIN, "operator", "moderator")
    Profile.objects.create(user=user, display_name=SHOWN)
    c = Client()
    c.force_login(user)
    c.user = user
    return c


def test_the_operator_panel_says_who_is_signed_in_by_display_name(olga):
    html = olga.get("/operate/").content.decode()
    assert f"signed in as <b>{SHOWN}</b>" in html and LOGIN not in html


def test_the_anomaly_log_and_its_triage_name_the_operator_by_display_name(olga):
    a = Anomaly.objects.create(run_id=RUN, key="k", kind="loss_spike", metric="train/loss", start_step=100,
                               peak_step=100, detected_step=100, severity="critical", score=2.0, explanation="x")
    resp = olga.post(f"/api/runs/{RUN}/anomalies/{a.id}/", json.dumps({"action": "explain", "note": "injected"}),
                     content_type="application/json")
    assert resp.status_code == 200
    assert (resp.json()["acknowledged_by"], resp.json()["resolved_by"]) == (SHOWN, SHOWN)
    html = olga.get(f"/runs/{RUN}/anomalies/").content.decode()
    assert f"acknowledged by {SHOWN}" in html and LOGIN not in html


def test_moderation_records_and_the_public_grafana_export_carry_display_names(olga):
    a = Annotation.objects.create(run_id=RUN, author=olga.user, title="note", body="text", body_html="<p>text</p>",
                                  step_start=10, step_end=20)
    grafana = Client().get(f"/api/runs/{RUN}/annotations/?format=grafana")
    assert [g["login"] for g in grafana.json()] == [SHOWN] and LOGIN not in grafana.content.decode()
    hidden = olga.post(f"/api/annotations/{a.id}/moderation/", json.dumps({"action": "hide", "reason": "test"}),
                       content_type="application/json")
    assert hidden.status_code == 200 and hidden.json()["hidden_by"] == SHOWN
    listed = olga.get(f"/api/runs/{RUN}/annotations/")
    assert listed.json()["annotations"][0]["hidden_by"] == SHOWN and LOGIN not in listed.content.decode()
