"""Reports fixtures: personas, a run with a loss series, an annotation with replies and an anomaly to cite."""

from __future__ import annotations

import pytest

from observatory import contract
from webapp.annotations.models import Annotation, Reply
from webapp.anomalies.models import Anomaly
from webapp.metrics.models import Series
from webapp.runs.models import Run

from ..accounts.conftest import _fresh_rate_limits, make_user, personas  # noqa: F401  (fixtures)

RUN = "rep-run"


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def world(db):
    run = Run.objects.create(id=RUN, name="reported", last_step=500)
    Series.objects.create(run=run, name=contract.M_LOSS, count=501, first_step=0, last_step=500)
    author = make_user("rep-annotator")
    ann = Annotation.objects.create(run=run, author=author, title="spike at 300", body="b", body_html="<p>b</p>",
                                    step_start=290, step_end=310)
    Reply.objects.create(annotation=ann, author=author, body="shard 7 restarted", body_html="<p>shard 7 restarted</p>")
    an = Anomaly.objects.create(run=run, key="loss_spike train/loss 300", kind="loss_spike", metric="train/loss",
                                start_step=300, peak_step=301, detected_step=302, severity="critical", score=2.0,
                                explanation="loss 6 at step 301 is 2× its running level 3")
    return {"run": run, "annotation": ann, "anomaly": an}


def body_for(world) -> str:
    return (f"Intro with **bold** and <script>alert(1)</script>.\n\n"
            f"{{{{chart run={RUN} series=train/loss steps=100..}}}}\n\n"
            f"{{{{annotation id={world['annotation'].id}}}}}\n"
            f"{{{{anomaly id={world['anomaly'].id}}}}}\n\nThe end.")


def matrix_report(pk: int, run_id: str):
    """For the matrix test's world: published report `pk` citing `run_id`, by its annotation's author (no persona)."""
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from webapp.reports import blocks
    from webapp.reports.models import Report

    body = f"matrix\n\n{{{{chart run={run_id} series=train/loss}}}}"
    parts = blocks.parse(body)
    report = Report.objects.create(pk=pk, author=get_user_model().objects.get(username="matrix-author"),
                                   title="matrix", body=body, parts=parts, published_at=timezone.now())
    report.runs.set(blocks.cited_runs(parts))
    return report
