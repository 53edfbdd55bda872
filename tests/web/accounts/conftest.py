"""Personas for permission tests: anonymous, member, moderator, operator — each a logged-in test client."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.test import Client

from webapp.accounts import roles


@pytest.fixture(autouse=True)
def _fresh_rate_limits():
    cache.clear()  # the test cache is this process's memory: rate-limit counters start at zero per test
    yield


def make_user(username: str, *role_names: str, password: str = "correct horse battery staple"):
    user = get_user_model().objects.create_user(username, f"{username}@example.org", password)
    for r in role_names:
        roles.grant(user, r)
    return user


@pytest.fixture
def personas(db):
    """persona name -> a test Client signed in as that role (anonymous: not signed in)."""
    clients = {"anonymous": Client()}
    for role in roles.ROLES:
        c = Client()
        c.force_login(make_user(f"{role}-user", role))
        clients[role] = c
    return clients
