"""The log-in lockout: django-axes' database handler with a second, higher limit per account across addresses."""

from __future__ import annotations

from axes.handlers.database import AxesDatabaseHandler
from axes.helpers import get_client_username
from axes.models import AccessLog
from django.conf import settings
from django.db.models import Sum


class AccountLockoutHandler(AxesDatabaseHandler):
    """Locks an (account, address) pair after AXES_FAILURE_LIMIT failures, and the account at every address after
    LOGIN_ACCOUNT_FAILURE_LIMIT failures from all addresses together, except at an address the account has logged
    in from before (others' guesses do not keep its owner out there). Both last AXES_COOLOFF_TIME after their last
    counted failure. Wants AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"], "username"]."""

    def get_failures(self, request, credentials: dict | None = None) -> int:
        pair, account = (attempts.aggregate(n=Sum("failures_since_start"))["n"] or 0
                         for attempts in self.get_user_attempts(request, credentials))
        if account and self.known_address(request, credentials):
            account = 0
        # axes compares one count with AXES_FAILURE_LIMIT: the account's, in units of its own (higher) limit
        return max(pair, account * settings.AXES_FAILURE_LIMIT // settings.LOGIN_ACCOUNT_FAILURE_LIMIT)

    @staticmethod
    def known_address(request, credentials: dict | None) -> bool:
        username = get_client_username(request, credentials)
        return AccessLog.objects.filter(username=username, ip_address=request.axes_ip_address).exists()
