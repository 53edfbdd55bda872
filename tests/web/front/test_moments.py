"""The front page's "What is happening" tells one cause once and keeps every kind of moment in sight: anomalies of
one kind on one run at one place (an injected fault spiking every domain's loss) are one moment with a count; a
storm of anomalies leaves room for annotations and operator actions; context (info anomalies, host notices) comes
after what a visitor should see first."""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib.auth import get_user_model

from observatory import contract
from webapp.annotations.models import Annotation
from webapp.anomalies.models import Anomaly
from webapp.runs import moments
from webapp.runs.models import Run

DOMAINS = ("web", "code", "math", "books", "wiki", "forums")
T0 = dt.datetime(2026, 12, 6, 12, 0, tzinfo=dt.timezone.utc)


def anomaly(run, kind, metric, step, severity="warning", minute=0):
    a = Anomaly.objects.create(run=run, key=f"{kind} {metric} {step}", kind=kind, metric=metric, start_step=step,
                               peak_step=step + 1, end_step=step + 3, detected_step=step + 1, severity=severity,
                               score=3.0, explanation=f"{metric} at step {step + 1} is 3x its running level")
    Anomaly.objects.filter(pk=a.pk).update(created_at=T0 + dt.timedelta(minutes=minute))
    return a


@pytest.fixture
def run(db):
    return Run.objects.create(id="demo", name="demo", state="training")


def test_one_fault_spiking_every_domain_is_one_moment_with_a_count(client, run):
    for i, m in enumerate([contract.M_LOSS] + [contract.domain_loss(d) for d in DOMAINS]):
        anomaly(run, "loss_spike", m, 300 + i % 3, minute=1)
    anomaly(run, "grad_norm_spike", contract.M_GRAD_NORM, 301, minute=1)
    anomaly(run, "loss_spike", contract.M_LOSS, 900, minute=2)  # a later spike: a moment of its own
    got = client.get("/api/front/").json()["moments"]
    spikes = [m for m in got if m["title"].startswith("loss spike")]
    assert [(m["step"], m["n"]) for m in spikes] == [(901, 1), (301, 7)]
    assert spikes[1]["title"] == "loss spike on 7 series" and "train/loss/code" in spikes[1]["detail"]
    assert len(got) == 3  # the grad-norm spike beside them
    assert "7 together" in client.get("/").content.decode()


def test_a_storm_of_anomalies_leaves_annotations_and_interventions_in_sight(client, run, monkeypatch):
    author = get_user_model().objects.create_user("ann", "ann@example.org", "x" * 12)
    note = Annotation.objects.create(run=run, author=author, title="why the plateau?", body="b", body_html="<p>b</p>",
                                     step_start=50, step_end=60)
    Annotation.objects.filter(pk=note.pk).update(created_at=T0)
    for i in range(30):  # newer than the note, far apart: 30 moments of their own
        anomaly(run, "loss_spike", contract.M_LOSS, 1000 + 200 * i, minute=10 + i)

    def interventions(limit):  # (the registry's own API: an operator's command, older than every anomaly)
        return [{"kind": "intervention", "id": "c1", "run_id": run.id, "run_name": "demo", "step": 40, "from": 20,
                 "to": 60, "title": "set-lr-multiplier", "detail": "calm the spikes", "count": None,
                 "t": T0.isoformat(), "url": f"/runs/{run.id}/?from=20&to=60"}]

    monkeypatch.setattr(moments, "MOMENT_SOURCES", [*moments.MOMENT_SOURCES, interventions])
    got = client.get("/api/front/").json()["moments"]
    assert len(got) == 12
    kinds = [m["kind"] for m in got]
    assert "annotation" in kinds and "intervention" in kinds
    times = [m["t"] for m in got]
    assert times == sorted(times, reverse=True)  # newest first


def test_context_comes_after_what_a_visitor_should_see_first(client, run):
    anomaly(run, "loss_spike", contract.M_LOSS, 300, minute=1)
    anomaly(run, "host_contention", contract.M_STEP_TIME, 400, severity="info", minute=5)  # newer, but context
    got = client.get("/api/front/").json()["moments"]
    assert [m["title"] for m in got] == ["loss spike on train/loss", "host contention on time/step_s"]
