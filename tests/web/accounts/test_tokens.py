"""Write tokens on the profile page: made by members and up, the secret shown once, only its hash kept, revocable."""

from __future__ import annotations

import hashlib
import re

import pytest
from django.test import Client

from observatory import contract
from webapp.accounts.models import WriteToken

from .conftest import make_user


@pytest.fixture
def alice(db):
    client = Client()
    client.force_login(make_user("alice", "member"))
    return client


def _secret(page: str) -> str:
    m = re.search(r'data-testid="new-token-secret">([^<]+)<', page)
    assert m, "the page does not show the new secret"
    return m.group(1)


def test_a_member_makes_a_token_and_sees_its_secret_once(alice):
    resp = alice.post("/accounts/tokens/", {"label": "laptop", "scope": "alice-*, shared-exp"})
    assert resp.status_code == 201 and resp["Cache-Control"] == "no-store"
    secret = _secret(resp.content.decode())
    assert secret.startswith(contract.INTAKE_TOKEN_PREFIX) and len(secret) > 40
    token = WriteToken.objects.get()
    assert token.secret_hash == hashlib.sha256(secret.encode()).hexdigest()
    assert secret not in {str(getattr(token, f.attname)) for f in WriteToken._meta.fields}
    assert token.scope == ["alice-*", "shared-exp"] and token.label == "laptop"
    page = alice.get("/accounts/profile/").content.decode()
    assert secret not in page and token.hint in page and "laptop" in page
    assert WriteToken.objects.for_secret(secret) == token


def test_it_refuses_a_scope_that_names_no_run(alice):
    for scope in ("", "*", "bad id!", "-x*"):
        resp = alice.post("/accounts/tokens/", {"label": "x", "scope": scope})
        assert resp.status_code == 400, scope
    assert not WriteToken.objects.exists()


def test_revoking_a_token_stops_it_and_only_its_owner_can(alice, db):
    alice.post("/accounts/tokens/", {"label": "laptop", "scope": "alice-*"})
    token = WriteToken.objects.get()
    bob = Client()
    bob.force_login(make_user("bob", "member"))
    assert bob.post(f"/accounts/tokens/{token.pk}/revoke/").status_code == 404
    assert alice.get(f"/accounts/tokens/{token.pk}/revoke/").status_code == 405
    resp = alice.post(f"/accounts/tokens/{token.pk}/revoke/")
    assert resp.status_code == 302
    token.refresh_from_db()
    assert token.revoked_at is not None and not token.active
    assert "revoked" in alice.get("/accounts/profile/").content.decode()


def test_the_scope_matches_exact_ids_and_prefixes():
    token = WriteToken(scope=WriteToken.parse_scope("alice-* exp.7"))
    assert token.allows("alice-1") and token.allows("alice-") and token.allows("exp.7")
    assert not token.allows("alic") and not token.allows("exp.70") and not token.allows("bob-alice-1")
