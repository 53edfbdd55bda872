"""Celery tasks: deliver an anomaly notification, retrying with back-off; every attempt is logged and recorded."""

from __future__ import annotations

import logging

from celery import shared_task

log = logging.getLogger("observatory.anomalies")
MAX_RETRIES = 5  # 6 attempts over about a minute and a half (back-off 3, 6, 12, 24, 48 s)
BACKOFF_S = 3


@shared_task(name="anomalies.deliver", bind=True, max_retries=MAX_RETRIES, ignore_result=True)
def deliver(self, delivery_id: int) -> str:
    """Send one Delivery; a failed attempt is retried later, the last failure marks it failed. Returns its status."""
    from webapp.anomalies.models import Delivery
    from webapp.anomalies.notify import DeliveryFailed, attempt

    d = Delivery.objects.select_related("route", "anomaly").filter(pk=delivery_id).first()
    if d is None or d.status == Delivery.SENT:
        return "gone" if d is None else d.status
    try:
        attempt(d)
    except DeliveryFailed as e:
        if self.request.retries >= self.max_retries:
            d.status = Delivery.FAILED
            d.save(update_fields=["status"])
            log.error("anomaly %s not delivered to %s after %d attempts: %s", d.anomaly_id, d.route, d.attempts, e)
            return d.status
        log.warning("anomaly %s to %s: attempt %d failed (%s); retrying", d.anomaly_id, d.route, d.attempts, e)
        raise self.retry(countdown=BACKOFF_S * 2 ** self.request.retries, exc=e) from None
    return d.status
