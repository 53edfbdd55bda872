"""The audit trail of operator commands: who asked what, why, and what the trainer said, from the web or the CLI.

A record's life comes from Redis and is written here (webapp.control.channel), never held in process memory:
`status` follows the trainer's acks (sent -> accepted -> applied | rejected), or is "unsent" when the web recorded a
command and then could not put it on the control stream; `undone_*` is set when a rollback
(or a restart from an older checkpoint) undid an applied command. "No answer" is not stored: it is a sent or
accepted command older than ACK_TIMEOUT_S, and it turns into the real outcome if the ack comes after all.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

ACK_TIMEOUT_S = 30  # no final ack after this long: shown as "no answer" (the trainer may be dead or stuck)


class OperatorCommand(models.Model):
    STATUSES = ("sent", "accepted", "applied", "rejected")  # the trainer's answers move a record along these
    UNSENT = "unsent"  # recorded, then the control stream could not be reached: never sent (the same id may be)
    SOURCES = (("web", "web"), ("cli", "command line"))
    id = models.CharField(primary_key=True, max_length=200)  # the command id on the wire (idempotency key)
    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="commands")
    name = models.CharField(max_length=40)
    args = models.JSONField(default=dict)
    reason = models.TextField()
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    source = models.CharField(max_length=8, choices=SOURCES, default="web")
    sender = models.CharField(max_length=150, blank=True)  # the entry's `user` field (a CLI user has no account)
    created_at = models.DateTimeField(default=timezone.now)
    status = models.CharField(max_length=16, default="sent")
    detail = models.TextField(blank=True)
    step = models.BigIntegerField(null=True)
    updated_at = models.DateTimeField(auto_now=True)
    sent_entry = models.CharField(max_length=40, blank=True)  # the first send's control entry (channel.answers)
    sent_count = models.PositiveIntegerField(default=1)  # a retry puts the same id on the stream again
    undone_by = models.CharField(max_length=200, blank=True)  # the rollback's command id, or "restart"
    undone_at = models.DateTimeField(null=True, blank=True)
    undone_detail = models.TextField(blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["run", "-created_at"])]  # a run's command log, newest first

    def __str__(self) -> str:
        return f"{self.name} on {self.run_id} ({self.outcome})"

    @property
    def final(self) -> bool:
        return self.status in ("applied", "rejected")

    @property
    def outcome(self) -> str:
        """What the page shows: sent, accepted, applied, rejected, undone, unsent or timeout (no answer yet)."""
        if self.undone_at is not None:
            return "undone"
        if self.status == self.UNSENT:
            return self.status
        if not self.final and (timezone.now() - self.created_at).total_seconds() > ACK_TIMEOUT_S:
            return "timeout"
        return self.status

    def operator_name(self, public: bool) -> str | None:
        """Who sent it; on public pages only if the operator opted in (accounts Profile.show_name_publicly)."""
        if self.user is not None:
            profile = getattr(self.user, "profile", None)
            if public and not (profile and profile.show_name_publicly):
                return None
            return profile.shown_name if profile else self.user.get_username()
        return None if public else (self.sender or None)

    def as_json(self, public: bool = False) -> dict:
        out = {"id": self.id, "run": self.run_id, "command": self.name, "args": self.args, "reason": self.reason,
               "user": self.operator_name(public), "status": self.status, "outcome": self.outcome,
               "detail": self.detail, "step": self.step, "created_at": self.created_at.isoformat(),
               "source": self.source, "undone_by": self.undone_by or None, "undone_detail": self.undone_detail,
               "undone_at": self.undone_at.isoformat() if self.undone_at else None}
        if not public:
            out["sent_count"] = self.sent_count
        return out


class RunControlKey(models.Model):
    """A run's control-key generation: the run's key is contract.run_control_key(master, run id, generation), where
    the master (OBS_CONTROL_KEY) stays with the web tier. No row: generation 0. `manage.py control_key <run>
    --rotate` moves one run to its next generation and leaves every other run's key as it was."""
    run_id = models.CharField(primary_key=True, max_length=200)  # also before the run is registered
    generation = models.PositiveIntegerField(default=0)
    rotated_at = models.DateTimeField(default=timezone.now)

    @classmethod
    def generation_of(cls, run_id: str) -> int:
        return cls.objects.filter(pk=run_id).values_list("generation", flat=True).first() or 0
