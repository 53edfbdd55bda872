"""A user's public face: the display name shown on annotations, and when the email address was confirmed."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Profile(models.Model):
    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="profile")
    display_name = models.CharField(max_length=80, blank=True)
    email_confirmed_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return self.shown_name

    @property
    def shown_name(self) -> str:
        return self.display_name or self.user.get_username()

    @classmethod
    def of(cls, user) -> "Profile":
        profile, _ = cls.objects.get_or_create(user=user)
        return profile
