"""Fixtures for intake tests: users with write tokens, and rate-limit counters that start at zero per test."""

from __future__ import annotations

import pytest
from django.core.cache import cache

from webapp.accounts import roles
from webapp.accounts.models import WriteToken

from ..accounts.conftest import make_user


@pytest.fixture(autouse=True)
def _fresh_rate_limits():
    cache.clear()
    yield


@pytest.fixture
def publisher_token(db):
    """publisher_token(username, *scope, role="member") -> (user, secret) of a fresh user's write token."""

    def make(username: str, *scope: str, role: str = roles.MEMBER):
        user = make_user(username, role)
        return user, WriteToken.issue(user, "test", list(scope) or [f"{username}-*"])[1]

    return make
