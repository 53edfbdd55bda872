"""Email-confirmation links: Django's password-reset token machinery, keyed on the account being inactive.

The token hashes the user's `is_active` flag, so a link works once: confirming activates the account and the
same link is invalid afterwards. It expires after settings.PASSWORD_RESET_TIMEOUT (3 days by default).
"""

from __future__ import annotations

from django.contrib.auth.tokens import PasswordResetTokenGenerator


class ConfirmationTokenGenerator(PasswordResetTokenGenerator):
    key_salt = "webapp.accounts.tokens.ConfirmationTokenGenerator"

    def _make_hash_value(self, user, timestamp):
        return f"{user.pk}{user.is_active}{user.email}{timestamp}"


confirmation_token = ConfirmationTokenGenerator()
