"""A user's public face (display name, email confirmation) and their write tokens for the HTTP intake."""

from __future__ import annotations

import hashlib
import secrets

from django.conf import settings
from django.db import models
from django.utils import timezone

from observatory import contract


class Profile(models.Model):
    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="profile")
    display_name = models.CharField(max_length=80, blank=True)
    email_confirmed_at = models.DateTimeField(null=True, blank=True)
    # Public pages (the intervention markers, a run's command log) name an operator only if they opted in.
    show_name_publicly = models.BooleanField(
        default=False, verbose_name="Show my name on my operator commands",
        help_text="Commands you send are public (what, when, why); with this, your display name is shown too.")

    def __str__(self) -> str:
        return self.shown_name

    @property
    def shown_name(self) -> str:
        return self.display_name or self.user.get_username()

    @classmethod
    def of(cls, user) -> "Profile":
        profile, _ = cls.objects.get_or_create(user=user)
        return profile


def shown_name(user) -> str | None:
    """What pages call a user: their display name (their login name only when they set none). The one rule for every
    page and record that names a person: a login name is half a credential."""
    if user is None:
        return None
    profile = getattr(user, "profile", None)  # no Profile row: None (select_related("...__profile") avoids a query)
    return (profile.shown_name if profile is not None else "") or user.get_username()


# (user, scope) -> why `user` may not hold a token with this scope, or None. Later apps add theirs in their
# AppConfig.ready (webapp.intake: only runs the user owns, or new ids); WriteToken.issue consults every one.
SCOPE_CHECKS: list = []


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class WriteTokenQuerySet(models.QuerySet):
    def active(self):
        return self.filter(revoked_at__isnull=True, user__is_active=True)

    def for_secret(self, secret: str) -> "WriteToken | None":
        """The active token with this secret (looked up by its hash), with its user; None if there is none."""
        if not secret or not secret.startswith(contract.INTAKE_TOKEN_PREFIX) or len(secret) > 200:
            return None
        return self.active().select_related("user").filter(secret_hash=_hash(secret)).first()


class WriteToken(models.Model):
    """A per-user secret that lets a training loop publish telemetry over HTTP to the runs in its scope.

    Only the SHA-256 of the secret is stored: the secret is shown once, when the token is made. The scope is a
    list of run ids and run-id prefixes ending in `*` (`alice-*`).
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="write_tokens")
    label = models.CharField(max_length=80)
    secret_hash = models.CharField(max_length=64, unique=True)  # serves: the intake's lookup by secret
    hint = models.CharField(max_length=12)  # the secret's first characters, to tell tokens apart on the page
    scope = models.JSONField(default=list)
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = WriteTokenQuerySet.as_manager()

    MAX_SCOPE = 50
    TOUCH_EVERY_S = 60  # last_used_at is refreshed at most this often: not one write per request

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["user", "-created_at"], name="writetoken_user")]  # serves: the profile list

    def __str__(self) -> str:
        return f"{self.label} ({self.hint}…)"

    @classmethod
    def issue(cls, user, label: str, scope: list[str]) -> tuple["WriteToken", str]:
        """A new token and its secret (the only time the secret exists outside the caller's hands). ValueError
        if the scope is malformed or names a run the user may not write (SCOPE_CHECKS)."""
        scope = cls.parse_scope(scope)
        for check in SCOPE_CHECKS:
            refused = check(user, scope)
            if refused:
                raise ValueError(refused)
        secret = contract.INTAKE_TOKEN_PREFIX + secrets.token_urlsafe(32)
        token = cls.objects.create(user=user, label=label, secret_hash=_hash(secret), hint=secret[:8], scope=scope)
        return token, secret

    @classmethod
    def parse_scope(cls, entries) -> list[str]:
        """Run ids and prefixes (`alice-*`), from a list or from text split on commas and white space."""
        if isinstance(entries, str):
            entries = entries.replace(",", " ").split()
        out = []
        for e in entries:
            if not contract.RUN_ID_RE.match(e[:-1] if e.endswith("*") else e):
                raise ValueError(f"{e!r} is neither a run id nor a run-id prefix like alice-*")
            if e not in out:
                out.append(e)
        if not out:
            raise ValueError("name at least one run id or prefix")
        if len(out) > cls.MAX_SCOPE:
            raise ValueError(f"at most {cls.MAX_SCOPE} entries")
        return out

    @property
    def active(self) -> bool:
        return self.revoked_at is None

    def allows(self, run_id: str) -> bool:
        return any(run_id.startswith(e[:-1]) if e.endswith("*") else run_id == e for e in self.scope)

    def revoke(self) -> None:
        if self.revoked_at is None:
            self.revoked_at = timezone.now()
            self.save(update_fields=["revoked_at"])

    def touch(self) -> None:
        now = timezone.now()
        if self.last_used_at is None or (now - self.last_used_at).total_seconds() >= self.TOUCH_EVERY_S:
            WriteToken.objects.filter(pk=self.pk).update(last_used_at=now)
            self.last_used_at = now
