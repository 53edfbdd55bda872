"""Notifications: which routes an anomaly goes to (plan), handing deliveries to Celery (enqueue), one attempt at
sending (attempt): a webhook JSON POST with a Slack-compatible "text", or an email through Django's mail.

Ingest only plans and enqueues (after its transaction commits); the sending, its retries and its logging happen in
the Celery worker (tasks.deliver), so a slow or dead endpoint never holds ingest up.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request

from django.conf import settings
from django.core.mail import send_mail
from django.db import IntegrityError, transaction
from django.utils import timezone

from webapp.anomalies.models import Anomaly, Delivery, NotificationRoute

log = logging.getLogger("observatory.anomalies")
TIMEOUT_S = 10.0
USER_AGENT = "observatory-anomalies/1"


class DeliveryFailed(Exception):
    """One attempt failed; the task retries it (with back-off) until its attempts run out."""


def plan(anomaly: Anomaly) -> list[int]:
    """New Delivery rows for the routes this anomaly (at its current severity) matches; their ids."""
    out = []
    for route in NotificationRoute.objects.filter(enabled=True):
        if not route.matches(anomaly):
            continue
        try:
            with transaction.atomic():  # a savepoint: a duplicate (a replayed batch) leaves the rest intact
                d, created = Delivery.objects.get_or_create(route=route, anomaly=anomaly, severity=anomaly.severity)
        except IntegrityError:
            continue
        if created:
            out.append(d.id)
    return out


def enqueue(delivery_id: int) -> None:
    """Hand a delivery to Celery; never raises (a broker outage is logged and the delivery marked failed)."""
    from webapp.anomalies.tasks import deliver

    try:
        deliver.apply_async((delivery_id,), retry=False)
    except Exception as e:
        log.error("could not queue anomaly delivery %s: %s", delivery_id, e)
        Delivery.objects.filter(pk=delivery_id).update(status=Delivery.FAILED, last_error=f"not queued: {e}"[:2000])


def link(anomaly: Anomaly) -> str:
    return f"{settings.OBS_PUBLIC_URL.rstrip('/')}/runs/{anomaly.run_id}/anomalies/#a-{anomaly.id}"


def summary(anomaly: Anomaly) -> str:
    where = f" on {anomaly.metric}" if anomaly.metric else ""
    text = (f"[{anomaly.severity}] {anomaly.kind.replace('_', ' ')}{where} at step {anomaly.start_step} "
            f"in run {anomaly.run_id}: {anomaly.explanation}")
    return " ".join(text.split())  # one line: it becomes an email subject


def payload(anomaly: Anomaly) -> dict:
    """The webhook body: Slack-style incoming webhooks read "text"; other receivers get the whole record."""
    return {"text": f"{summary(anomaly)} <{link(anomaly)}>", "run": anomaly.run_id, "url": link(anomaly),
            "anomaly": anomaly.as_json()}


def attempt(delivery: Delivery) -> None:
    """Send once; record the outcome on the delivery. Raises DeliveryFailed when it should be retried."""
    delivery.attempts += 1
    try:
        if delivery.route.channel == NotificationRoute.WEBHOOK:
            _post(delivery.route.target.strip(), payload(delivery.anomaly))
        else:
            _email(delivery.route.recipients(), delivery.anomaly)
    except DeliveryFailed as e:
        delivery.last_error = str(e)[:2000]
        delivery.save(update_fields=["attempts", "last_error"])
        raise
    delivery.status, delivery.sent_at, delivery.last_error = Delivery.SENT, timezone.now(), ""
    delivery.save(update_fields=["attempts", "status", "sent_at", "last_error"])
    log.info("anomaly %s sent to %s", delivery.anomaly_id, delivery.route)


def _post(url: str, body: dict) -> None:
    if not url.startswith(("http://", "https://")):
        raise DeliveryFailed(f"not an http(s) URL: {url[:80]!r}")
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json", "User-Agent": USER_AGENT})
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:
            resp.read(4096)
    except urllib.error.HTTPError as e:
        raise DeliveryFailed(f"HTTP {e.code} from the webhook") from None
    except (urllib.error.URLError, OSError, ValueError) as e:
        raise DeliveryFailed(f"webhook unreachable: {getattr(e, 'reason', e)}") from None


def _email(to: list[str], anomaly: Anomaly) -> None:
    if not to:
        raise DeliveryFailed("the route names no email address")
    try:
        send_mail(f"Observatory: {summary(anomaly)}"[:200], f"{summary(anomaly)}\n\n{link(anomaly)}\n",
                  settings.DEFAULT_FROM_EMAIL, to)
    except Exception as e:  # SMTP errors, a full disk for the file backend, ...
        raise DeliveryFailed(f"email not sent: {e}") from None
