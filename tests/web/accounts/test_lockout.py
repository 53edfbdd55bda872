"""The log-in lockout across addresses: many addresses guessing one account lock it, for a bounded time, and not
where its owner logged in before; the lockout and the rate limits read one address (REMOTE_ADDR, never a header)."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta

import pytest
from axes.models import AccessAttempt
from django.test import Client

from ..servers import ROOT
from .conftest import make_user

pytestmark = pytest.mark.django_db
PASSWORD = "an unguessable passphrase 42"
LOCKED = b"Account locked"


@pytest.fixture(autouse=True)
def grace(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # dozens of failed log-ins
    make_user("grace", password=PASSWORD)


def _login(address: str, password: str, **headers):
    client = Client(REMOTE_ADDR=address)
    resp = client.post("/accounts/login/", {"username": "grace", "password": password}, **headers)
    return resp, "_auth_user_id" in client.session


def _guess_from_many_addresses(n: int) -> list[int]:
    """One wrong guess from each of n addresses (no (account, address) pair reaches its own limit): the codes."""
    return [_login(f"10.1.{i // 250}.{i % 250 + 1}", "wrong")[0].status_code for i in range(n)]


def test_guesses_from_many_addresses_lock_the_account_even_with_the_right_password(settings):
    limit = settings.LOGIN_ACCOUNT_FAILURE_LIMIT
    assert _guess_from_many_addresses(limit) == [200] * (limit - 1) + [429]  # the guess reaching it is refused
    resp, logged_in = _login("10.9.9.9", PASSWORD)
    assert resp.status_code == 429 and LOCKED in resp.content and not logged_in


def test_fewer_guesses_than_the_account_limit_hold_no_one_back(settings):
    assert set(_guess_from_many_addresses(settings.LOGIN_ACCOUNT_FAILURE_LIMIT - 1)) == {200}
    assert _login("10.9.9.9", PASSWORD)[1]


def test_the_owner_still_logs_in_from_an_address_it_used_before(settings):
    assert _login("192.0.2.5", PASSWORD)[1]
    _guess_from_many_addresses(settings.LOGIN_ACCOUNT_FAILURE_LIMIT)
    assert _login("10.9.9.9", PASSWORD)[0].status_code == 429  # a new address: held
    assert _login("192.0.2.5", PASSWORD)[1]


def test_the_account_lock_ends_one_cool_off_after_it_began_whatever_is_tried_meanwhile(settings):
    _guess_from_many_addresses(settings.LOGIN_ACCOUNT_FAILURE_LIMIT)
    last = max(AccessAttempt.objects.values_list("attempt_time", flat=True))
    for i in range(5):  # refused while locked, and not counted: they do not extend the lock
        assert _login(f"10.7.0.{i + 1}", "wrong")[0].status_code == 429
    assert max(AccessAttempt.objects.values_list("attempt_time", flat=True)) == last
    assert _login("10.9.9.9", PASSWORD)[0].status_code == 429
    cool_off = timedelta(hours=settings.AXES_COOLOFF_TIME)
    for attempt in AccessAttempt.objects.all():  # the cool-off passes: every failure is that much older
        attempt.attempt_time -= cool_off + timedelta(seconds=1)
        attempt.save(update_fields=["attempt_time"])
    assert _login("10.9.9.9", PASSWORD)[1]


def test_the_lockout_and_the_rate_limit_count_the_peer_not_a_forwarded_header(settings):
    for i in range(settings.AXES_FAILURE_LIMIT):
        _login("10.0.0.7", "wrong", HTTP_X_FORWARDED_FOR=f"203.0.113.{i + 1}", HTTP_X_REAL_IP=f"203.0.113.{i + 1}")
    assert set(AccessAttempt.objects.values_list("ip_address", flat=True)) == {"10.0.0.7"}
    resp, logged_in = _login("10.0.0.7", PASSWORD, HTTP_X_FORWARDED_FOR="198.51.100.7")
    assert resp.status_code == 429 and LOCKED in resp.content and not logged_in
    client, codes = Client(REMOTE_ADDR="10.0.0.8"), []
    while 429 not in codes and len(codes) <= 20:  # within two one-minute windows, a limit of 10 refuses the 21st
        codes.append(client.post("/accounts/password_reset/", {"email": "n@example.org"},
                                 HTTP_X_FORWARDED_FOR=f"203.0.113.{len(codes) + 1}").status_code)
    assert codes[-1] == 429


@pytest.mark.parametrize("pair, account", [("0", "20"), ("5", "4"), ("5", "many")])
def test_bad_lockout_limits_stop_the_site_with_a_clear_error(pair, account, tmp_path):
    env = {"PATH": "/usr/bin:/bin", "OBS_DEBUG": "1", "OBS_DATA_DIR": str(tmp_path), "PYTHONPATH": str(ROOT),
           "OBS_LOGIN_FAILURE_LIMIT": pair, "OBS_LOGIN_ACCOUNT_FAILURE_LIMIT": account}
    out = subprocess.run([sys.executable, "-c", "import webapp.settings"], cwd=ROOT, env=env, capture_output=True,
                         text=True)
    assert out.returncode != 0 and "ImproperlyConfigured" in out.stderr
    assert "OBS_LOGIN_ACCOUNT_FAILURE_LIMIT" in out.stderr.splitlines()[-1]
