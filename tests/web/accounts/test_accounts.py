"""Sign up, confirm by email, log in, profile, log out; roles; brute-force and rate limits."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from django.core import mail
from django.core.management import CommandError, call_command
from django.test import Client

from webapp.accounts import roles
from webapp.accounts.models import Profile

from .conftest import make_user

pytestmark = pytest.mark.django_db
PASSWORD = "an unguessable passphrase 42"


def _signup(client, username="ada", email="ada@example.org", display="Ada L."):
    return client.post("/accounts/signup/", {"username": username, "email": email, "display_name": display,
                                             "password1": PASSWORD, "password2": PASSWORD})


def _logs_in(client, username, password) -> bool:
    client.post("/accounts/login/", {"username": username, "password": password})
    return "_auth_user_id" in client.session


def _emailed_link(message) -> str:
    return re.search(r"https?://\S+", message.body).group(0)


def test_a_new_account_is_an_inactive_member_until_the_emailed_link_is_followed():
    client = Client()
    resp = _signup(client)
    assert resp.status_code == 200 and b"Check your email" in resp.content
    user = get_user_model().objects.get(username="ada")
    assert not user.is_active and user.groups.filter(name="member").exists()
    assert Profile.objects.get(user=user).display_name == "Ada L."
    assert len(mail.outbox) == 1 and mail.outbox[0].to == ["ada@example.org"]
    assert not _logs_in(client, "ada", PASSWORD)  # inactive: cannot log in yet

    link = _emailed_link(mail.outbox[0])
    resp = client.get(link)
    assert resp.status_code == 302 and resp["Location"].endswith("/accounts/login/")
    user.refresh_from_db()
    assert user.is_active and Profile.of(user).email_confirmed_at is not None
    assert client.get(link).status_code == 400  # a confirmation link works once

    resp = client.post("/accounts/login/", {"username": "ada", "password": PASSWORD})
    assert resp.status_code == 302
    page = client.get("/accounts/profile/")
    assert page.status_code == 200 and b"member" in page.content
    client.post("/accounts/profile/", {"display_name": "Ada Lovelace"})
    assert Profile.of(user).display_name == "Ada Lovelace"
    assert client.post("/accounts/logout/").status_code == 302
    assert client.get("/accounts/profile/").status_code == 302  # back to the login page


def test_sign_up_refuses_a_taken_email_and_a_weak_password():
    make_user("grace")
    resp = _signup(Client(), username="other", email="GRACE@example.org")
    assert resp.status_code == 200 and b"exists" in resp.content
    resp = Client().post("/accounts/signup/", {"username": "x", "email": "x@example.org",
                                                "password1": "123", "password2": "123"})
    assert b"too short" in resp.content and not get_user_model().objects.filter(username="x").exists()


def test_a_forged_confirmation_link_is_refused():
    _signup(Client())
    link = _emailed_link(mail.outbox[0])
    assert Client().get(link[:-3] + "xyz/").status_code == 400
    assert Client().get("/accounts/confirm/bm9wZQ/abc-def/").status_code == 400


def test_password_reset_mails_a_link_that_sets_a_new_password():
    make_user("grace")
    client = Client()
    assert client.post("/accounts/password_reset/", {"email": "grace@example.org"}).status_code == 302
    link = _emailed_link(mail.outbox[0])
    resp = client.get(link, follow=True)  # Django swaps the token for a session and redirects
    form_url = resp.redirect_chain[-1][0]
    resp = client.post(form_url, {"new_password1": PASSWORD, "new_password2": PASSWORD})
    assert resp.status_code == 302
    assert _logs_in(Client(), "grace", PASSWORD)


def test_repeated_failed_logins_lock_the_account_out_even_with_the_right_password(settings):
    make_user("grace", password=PASSWORD)
    client = Client(REMOTE_ADDR="10.0.0.7")
    for _ in range(settings.AXES_FAILURE_LIMIT):
        client.post("/accounts/login/", {"username": "grace", "password": "wrong"})
    resp = client.post("/accounts/login/", {"username": "grace", "password": PASSWORD})
    assert resp.status_code == 429 and "_auth_user_id" not in client.session


def test_writes_are_rate_limited_per_address():
    client = Client(REMOTE_ADDR="10.0.0.9")
    codes = [client.post("/accounts/password_reset/", {"email": f"n{i}@example.org"}).status_code
             for i in range(12)]
    assert codes[:10] == [302] * 10 and codes[10:] == [429, 429]


def test_grant_gives_and_takes_roles_and_names_bad_input(capsys):
    user = make_user("lin")
    call_command("grant", "lin", "operator")
    assert roles.roles_of(get_user_model().objects.get(pk=user.pk)) == {"operator"}
    call_command("grant", "lin", "operator", "--revoke")
    assert roles.roles_of(get_user_model().objects.get(pk=user.pk)) == frozenset()
    with pytest.raises(CommandError, match="no user named 'nobody'"):
        call_command("grant", "nobody", "member")


def test_a_superuser_is_an_operator_and_an_inactive_user_has_no_role():
    boss = get_user_model().objects.create_superuser("boss", "b@example.org", PASSWORD)
    assert roles.OPERATOR in roles.roles_of(boss)
    gone = make_user("gone", "operator")
    gone.is_active = False
    assert roles.roles_of(gone) == frozenset()
