"""Stored anomalies with their triage, each run's detector state, and where critical anomalies are sent."""

from __future__ import annotations

import math

from django.conf import settings
from django.db import models
from django.utils import timezone

from observatory.anomalies import SEVERITIES
from observatory.anomalies.model import RANK
from webapp.accounts.models import shown_name

# Triage: open -> acknowledged -> explained | false_alarm (explained and false_alarm may also follow open directly).
OPEN, ACKNOWLEDGED, EXPLAINED, FALSE_ALARM = "open", "acknowledged", "explained", "false_alarm"
STATUSES = (OPEN, ACKNOWLEDGED, EXPLAINED, FALSE_ALARM)
ACTIONS = {"acknowledge": ACKNOWLEDGED, "explain": EXPLAINED, "false_alarm": FALSE_ALARM}
NEXT = {OPEN: {ACKNOWLEDGED, EXPLAINED, FALSE_ALARM}, ACKNOWLEDGED: {EXPLAINED, FALSE_ALARM},
        EXPLAINED: set(), FALSE_ALARM: set()}
MAX_NOTE = 1000


class TriageError(ValueError):
    """A triage step that cannot be taken: `status` 400 (bad request) or 409 (the anomaly's status forbids it)."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


class Anomaly(models.Model):
    """One episode a detector saw (observatory.anomalies.Anomaly), upserted on its key while it lasts."""

    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="anomalies")
    key = models.CharField(max_length=300)  # observatory's Anomaly.key: "kind metric start_step"
    kind = models.CharField(max_length=40)
    metric = models.CharField(max_length=200, blank=True)
    start_step = models.BigIntegerField()
    peak_step = models.BigIntegerField()
    end_step = models.BigIntegerField(null=True, blank=True)  # None while the episode lasts
    detected_step = models.BigIntegerField()  # the step whose data opened it (delay = detected - start)
    severity = models.CharField(max_length=8, choices=[(s, s) for s in SEVERITIES])
    score = models.FloatField()
    explanation = models.TextField()
    superseded = models.BooleanField(default=False)  # found on points a rewind replaced; kept as history
    status = models.CharField(max_length=16, default=OPEN, choices=[(s, s) for s in STATUSES])
    note = models.TextField(blank=True)  # why: the operator's explanation
    acknowledged_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                        related_name="+")
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    resolved_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                    related_name="+")
    resolved_at = models.DateTimeField(null=True, blank=True)
    notified_severity = models.CharField(max_length=8, blank=True)  # the highest severity routed so far
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-start_step", "-id"]
        indexes = [
            # serves: a run's log newest first (page, API, dashboard), its filters, and the rewind's
            # "start_step > to_step" supersede
            models.Index(fields=["run", "-start_step"], name="anomaly_run_start"),
        ]
        constraints = [
            # serves: ingest's upsert by key (and enforces one live record per episode; superseded ones are
            # history, and a replayed timeline may find an episode with the same key again)
            models.UniqueConstraint(fields=["run", "key"], condition=models.Q(superseded=False),
                                    name="anomaly_run_key_live"),
        ]

    def __str__(self):
        return f"{self.run_id}: {self.kind} {self.metric} @{self.start_step}"

    @property
    def ongoing(self) -> bool:
        return self.end_step is None and not self.superseded

    def set_from(self, a) -> None:
        """Copy an observatory Anomaly's fields (a newer state of the same episode)."""
        self.kind, self.metric = a.kind[:40], a.metric[:200]
        self.start_step, self.peak_step, self.end_step = a.start_step, a.peak_step, a.end_step
        self.severity, self.explanation = a.severity, a.explanation[:2000]
        self.score = a.score if math.isfinite(a.score) else 1e300
        self.updated_at = timezone.now()

    def zoom(self) -> tuple[int, int]:
        """A step window around the episode for the dashboard link: the episode plus context on both sides."""
        end = self.end_step if self.end_step is not None else max(self.peak_step, self.detected_step)
        pad = max(20, (end - self.start_step) // 2)
        return max(0, self.start_step - pad), end + pad

    def next_actions(self) -> list[str]:
        """The triage actions this anomaly's status allows (the page offers these)."""
        return [a for a, target in ACTIONS.items() if target in NEXT[self.status]]

    def next_action_labels(self) -> list[tuple[str, str]]:
        return [(a, a.replace("_", " ")) for a in self.next_actions()]

    @property
    def status_label(self) -> str:
        return self.status.replace("_", " ")

    @property
    def acknowledged_by_name(self) -> str | None:
        return shown_name(self.acknowledged_by)

    @property
    def resolved_by_name(self) -> str | None:
        return shown_name(self.resolved_by)

    def triage(self, action: str, user, note: str) -> None:
        """Acknowledge, explain or mark a false alarm (caller saves). Raises TriageError."""
        if not isinstance(action, str) or action not in ACTIONS:
            raise TriageError(f"action must be one of {', '.join(ACTIONS)}")
        target = ACTIONS[action]
        if target not in NEXT[self.status]:
            raise TriageError(f"an anomaly that is {self.status.replace('_', ' ')} cannot be marked "
                              f"{target.replace('_', ' ')}", status=409)
        note = clean_note(note)
        if target != ACKNOWLEDGED and not note:
            raise TriageError("say why (a note is required to explain or dismiss an anomaly)")
        now = timezone.now()
        if self.acknowledged_at is None:
            self.acknowledged_by, self.acknowledged_at = user, now
        if target != ACKNOWLEDGED:
            self.resolved_by, self.resolved_at = user, now
        self.status = target
        if note:
            self.note = note
        self.updated_at = now

    def as_json(self, who: bool = False) -> dict:
        """The record the API, the pages' JSON and the live frames carry. `who`: operators' user names too."""
        zoom = self.zoom()
        out = {"id": self.id, "key": self.key, "kind": self.kind, "metric": self.metric,
               "start_step": self.start_step, "peak_step": self.peak_step, "end_step": self.end_step,
               "detected_step": self.detected_step, "severity": self.severity, "score": self.score,
               "explanation": self.explanation, "superseded": self.superseded, "status": self.status,
               "note": self.note, "acknowledged_at": _iso(self.acknowledged_at), "resolved_at": _iso(self.resolved_at),
               "created_at": _iso(self.created_at), "updated_at": _iso(self.updated_at),
               "zoom": {"from": zoom[0], "to": zoom[1]}}
        if who:
            out["acknowledged_by"], out["resolved_by"] = self.acknowledged_by_name, self.resolved_by_name
        return out


class DetectorState(models.Model):
    """A run's Monitor snapshot, saved with each batch's anomalies: an ingest restart resumes from it exactly."""

    run = models.OneToOneField("runs.Run", on_delete=models.CASCADE, primary_key=True, related_name="+")
    snapshot = models.JSONField(default=dict)  # observatory.anomalies.Monitor.snapshot() (plain JSON, no NaN)
    last_step = models.BigIntegerField(null=True)  # the newest step fed (for people reading the admin)
    version = models.BigIntegerField(default=0)  # bumped on every save: a cached Monitor is current iff equal
    updated_at = models.DateTimeField(default=timezone.now)

    def __str__(self):
        return f"detector state of {self.run_id} (step {self.last_step})"


class NotificationRoute(models.Model):
    """Where anomalies are sent (edited in the Django admin): a webhook (JSON POST with a Slack-style "text") or
    email addresses; anomalies at or above `min_severity`, of the listed kinds (blank: all), of matching runs."""

    WEBHOOK, EMAIL = "webhook", "email"
    name = models.CharField(max_length=100)
    channel = models.CharField(max_length=8, choices=[(WEBHOOK, "webhook"), (EMAIL, "email")])
    target = models.TextField(help_text="webhook: the URL; email: addresses separated by commas")
    min_severity = models.CharField(max_length=8, default="critical", choices=[(s, s) for s in SEVERITIES])
    kinds = models.CharField(max_length=500, blank=True, help_text="comma-separated kinds; blank for every kind")
    run_prefix = models.CharField(max_length=64, blank=True, help_text="only runs whose id starts with this")
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self):
        return f"{self.name} ({self.channel})"

    def matches(self, anomaly: Anomaly) -> bool:
        kinds = {k.strip() for k in self.kinds.split(",") if k.strip()}
        return (self.enabled and RANK[anomaly.severity] >= RANK[self.min_severity]
                and (not kinds or anomaly.kind in kinds) and anomaly.run_id.startswith(self.run_prefix))

    def recipients(self) -> list[str]:
        return [a.strip() for a in self.target.split(",") if a.strip()]


class Delivery(models.Model):
    """One anomaly sent (or being sent) along one route at one severity: the audit trail of notifications."""

    PENDING, SENT, FAILED = "pending", "sent", "failed"
    route = models.ForeignKey(NotificationRoute, on_delete=models.CASCADE, related_name="deliveries")
    anomaly = models.ForeignKey(Anomaly, on_delete=models.CASCADE, related_name="deliveries")
    severity = models.CharField(max_length=8)  # the anomaly's severity when it was routed
    status = models.CharField(max_length=8, default=PENDING)
    attempts = models.IntegerField(default=0)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            # serves: "already sent this one?" when a replayed batch routes the same anomaly again
            models.UniqueConstraint(fields=["route", "anomaly", "severity"], name="delivery_once"),
        ]

    def __str__(self):
        return f"{self.anomaly} -> {self.route} ({self.status})"


def clean_note(text) -> str:
    """User text for the log: a string, control characters removed, at most MAX_NOTE characters."""
    if not isinstance(text, str):
        return ""
    text = "".join(ch if ch in "\n\t" or ch >= " " else " " for ch in text).strip()
    return text[:MAX_NOTE]


def _iso(t):
    return t.isoformat() if t else None
