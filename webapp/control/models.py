"""The audit trail of operator commands sent from the web: who asked what, why, and what the trainer said."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class OperatorCommand(models.Model):
    STATUSES = ("sent", "accepted", "applied", "rejected")
    id = models.CharField(primary_key=True, max_length=200)  # the command id on the wire (idempotency key)
    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="commands")
    name = models.CharField(max_length=40)
    args = models.JSONField(default=dict)
    reason = models.TextField()
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)
    status = models.CharField(max_length=16, default="sent")
    detail = models.TextField(blank=True)
    step = models.BigIntegerField(null=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["run", "-created_at"])]  # a run's command log, newest first

    def as_json(self) -> dict:
        return {"id": self.id, "run": self.run_id, "command": self.name, "args": self.args, "reason": self.reason,
                "user": self.user.get_username() if self.user else None, "status": self.status,
                "detail": self.detail, "step": self.step, "created_at": self.created_at.isoformat()}
