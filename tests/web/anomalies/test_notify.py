"""Critical anomalies reach a webhook (a real local HTTP server) and email through Celery, once each, with retries;
a dead endpoint or broker never holds ingest up."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from webapp.anomalies.models import Anomaly, Delivery, NotificationRoute

from . import curves

pytestmark = pytest.mark.django_db(transaction=True)


class Hook:
    """A local webhook receiver: answers `codes` in turn (then 200) and keeps every JSON body it got."""

    def __init__(self, codes=()):
        self.bodies, self.codes = [], list(codes)
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                code = hook.codes.pop(0) if hook.codes else 200
                if code == 200:
                    hook.bodies.append(body)
                self.send_response(code)
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hooks/obs"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def eager():
    """Celery runs tasks in this process (retries included) instead of queueing them for a worker."""
    from webapp.celery import app

    app.conf.task_always_eager = True
    yield app
    app.conf.task_always_eager = False


@pytest.fixture
def hook():
    h = Hook()
    yield h
    h.close()


def test_a_critical_anomaly_found_by_ingest_is_posted_to_the_webhook_once(trainer, live_ingest, run_id, eager, hook,
                                                                         settings):
    settings.OBS_PUBLIC_URL = "https://obs.example.org"
    NotificationRoute.objects.create(name="lab slack", channel="webhook", target=hook.url)
    NotificationRoute.objects.create(name="warnings too", channel="webhook", target=hook.url, enabled=False,
                                     min_severity="warning")
    data = curves.rows(320)  # one loss spike (step 300), critical
    curves.publish(trainer, data)
    live_ingest.drain()
    spikes = Anomaly.objects.filter(run_id=run_id, severity="critical")
    assert spikes.exists()
    assert len(hook.bodies) == spikes.count()
    body = next(b for b in hook.bodies if b["anomaly"]["metric"] == "train/loss")
    assert body["run"] == run_id and body["anomaly"]["kind"] == "loss_spike" and body["anomaly"]["start_step"] == 300
    assert body["text"].startswith("[critical] loss spike on train/loss at step 300")  # Slack-style "text"
    assert f"https://obs.example.org/runs/{run_id}/anomalies/#a-" in body["text"]
    assert set(Delivery.objects.values_list("status", "attempts")) == {("sent", 1)}
    # the batch is delivered again (a crash before its XACK): nothing is sent twice
    from webapp.anomalies.detect import DETECTION

    DETECTION.cache.clear()
    trainer.r.delete(trainer.stream)
    curves.publish(trainer, data)
    live_ingest.drain()
    assert len(hook.bodies) == spikes.count()


def test_a_failing_webhook_is_retried_then_recorded(db, eager):
    from webapp.anomalies import notify
    from webapp.runs.models import Run

    flaky = Hook(codes=[500, 503])
    try:
        Run.objects.create(id="notify-run")
        a = Anomaly.objects.create(run_id="notify-run", key="nonfinite  5", kind="nonfinite", start_step=5,
                                   peak_step=5, detected_step=5, severity="critical", score=1.0,
                                   explanation="train/loss is NaN at step 5")
        route = NotificationRoute.objects.create(name="flaky", channel="webhook", target=flaky.url)
        (d_id,) = notify.plan(a)
        assert notify.plan(a) == []  # planned once per severity
        notify.enqueue(d_id)
        d = Delivery.objects.get(pk=d_id)
        assert (d.status, d.attempts) == ("sent", 3) and len(flaky.bodies) == 1
        dead = NotificationRoute.objects.create(name="dead", channel="webhook", target="http://127.0.0.1:9/x")
        route.delete()
        (d_id,) = notify.plan(a)
        notify.enqueue(d_id)
        d = Delivery.objects.get(pk=d_id)
        assert d.route == dead and d.status == "failed" and d.attempts == 6 and "unreachable" in d.last_error
    finally:
        flaky.close()


def test_email_routes_write_through_django_mail(trainer, live_ingest, run_id, eager, settings, tmp_path):
    settings.EMAIL_BACKEND = "django.core.mail.backends.filebased.EmailBackend"
    settings.EMAIL_FILE_PATH = str(tmp_path)
    NotificationRoute.objects.create(name="on-call", channel="email", target="a@example.org, b@example.org",
                                     kinds="nonfinite")
    curves.publish(trainer, curves.rows(440))  # spikes at 300 (not routed: kind) and a NaN at 420
    live_ingest.drain()
    (mail,) = [p.read_text() for p in tmp_path.iterdir()]
    assert "Subject: Observatory: [critical] nonfinite" in mail and "a@example.org, b@example.org" in mail
    assert f"/runs/{run_id}/anomalies/#a-" in mail


def test_a_broker_outage_marks_the_delivery_failed_and_ingest_goes_on(trainer, live_ingest, run_id, monkeypatch,
                                                                      caplog):
    from webapp.anomalies import tasks

    def down(*args, **kwargs):
        raise ConnectionError("broker down")

    monkeypatch.setattr(tasks.deliver, "apply_async", down)
    NotificationRoute.objects.create(name="slack", channel="webhook", target="http://127.0.0.1:9/")
    curves.publish(trainer, curves.rows(320))
    assert live_ingest.drain() == 320
    assert Delivery.objects.exists() and "could not queue" in caplog.text
    assert all(d.status == "failed" and "broker down" in d.last_error for d in Delivery.objects.all())
