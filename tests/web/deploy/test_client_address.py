"""The client's address cannot be chosen by the client: a rotating X-Forwarded-For neither escapes the log-in
lockout nor the sign-up limit, under the server `make run` starts and behind deploy/nginx.conf with the image's web
command; guesses from many real addresses (127.0.0.0/8 is all this machine's) lock the account they guess."""

from __future__ import annotations

import http.client
import re
import subprocess
import sys
from urllib.parse import urlencode

import pytest
import yaml
from django.contrib.auth import get_user_model

from ..servers import ROOT, free_port, logged_web, stop, wait_port
from .test_server import _nginx_conf

pytestmark = pytest.mark.django_db(transaction=True)
PASSWORD = "an unguessable passphrase 42"
PAIR_LIMIT, ACCOUNT_LIMIT = 3, 6  # the servers' lockout limits here (small: every failed guess hashes a password)
SIGNUP_LIMIT = 10  # webapp.accounts.views.WRITE_RATE, per minute
LIMITS = {"OBS_LOGIN_FAILURE_LIMIT": str(PAIR_LIMIT), "OBS_LOGIN_ACCOUNT_FAILURE_LIMIT": str(ACCOUNT_LIMIT)}
LOCKED = "Account locked"  # django-axes' refusal (the rate limit's 429 says "Too many requests")


class Browser:
    """One client of the site over real HTTP from a chosen loopback address, keeping the cookies it is given and
    the CSRF token of the last form page it read (cookies by hand: production marks them Secure)."""

    def __init__(self, port: int, source: str = "127.0.0.1"):
        self.port, self.source, self.cookies, self.token = port, source, {}, None

    def request(self, method: str, path: str, form: dict | None = None, headers: dict | None = None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60, source_address=(self.source, 0))
        hdrs = {"Host": "127.0.0.1", **(headers or {})}
        if self.cookies:
            hdrs["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        body = None
        if form is not None:
            body = urlencode(form)
            hdrs["Content-Type"] = "application/x-www-form-urlencoded"
        try:
            conn.request(method, path, body, hdrs)
            resp = conn.getresponse()
            text = resp.read().decode()
        finally:
            conn.close()
        for cookie in resp.headers.get_all("Set-Cookie") or []:
            name, _, rest = cookie.partition("=")
            self.cookies[name] = rest.split(";")[0]
        return resp.status, text

    def post(self, path: str, form: dict, forwarded_for: str | None = None):
        if self.token is None:
            status, page = self.request("GET", path)
            assert status == 200, (status, page[:300])
            self.token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
        headers = {"X-Forwarded-For": forwarded_for} if forwarded_for else {}
        return self.request("POST", path, {**form, "csrfmiddlewaretoken": self.token}, headers)


def _login(browser: Browser, password: str, forwarded_for: str | None = None):
    return browser.post("/accounts/login/", {"username": "grace", "password": password}, forwarded_for)


def _signup(browser: Browser, forwarded_for: str):
    return browser.post("/accounts/signup/", {"username": "", "email": ""}, forwarded_for)[0]


def rotating_header_attack(port: int) -> None:
    """From one real address: wrong passwords and sign-ups, each with a new X-Forwarded-For."""
    get_user_model().objects.create_user("grace", "grace@example.org", PASSWORD)
    attacker = Browser(port)
    for i in range(PAIR_LIMIT):
        status, _ = _login(attacker, "wrong", f"203.0.113.{i + 1}")
        assert status in (200, 429), status  # the form again (a wrong password), or locked from the last one on
    status, text = _login(attacker, PASSWORD, "198.51.100.7")
    assert status == 429 and LOCKED in text, (status, text[:300])
    # A fixed one-minute window of the rate limit may close during the loop: within two windows, at most twice the
    # limit passes, so a request up to 2 * limit + 1 must be refused.
    codes = []
    while 429 not in codes and len(codes) <= 2 * SIGNUP_LIMIT:
        codes.append(_signup(attacker, f"203.0.113.{len(codes) + 1}"))
    assert codes[-1] == 429, codes


@pytest.fixture
def make_run_web(live_env, redis_client, tmp_path):
    """The web server as `make run` starts it (deploy/run_local.py's web_command, debug on), with uvicorn's own
    FORWARDED_ALLOW_IPS variable set to trust everyone: make run must not let it in."""
    env = {**live_env, **LIMITS, "FORWARDED_ALLOW_IPS": "*"}
    env.pop("OBS_TRUSTED_PROXIES", None)
    with logged_web(env, tmp_path / "web.log") as port:
        yield port


def _image_web_argv(host: str, port: int) -> list[str]:
    """deploy/Dockerfile's CMD, run here: this Python, this host and port."""
    text = (ROOT / "deploy" / "Dockerfile").read_text().replace("\\\n", "")
    argv = yaml.safe_load(re.search(r"^CMD (\[.*?\])\s*$", text, re.M | re.S).group(1))
    assert argv[0] == "python"
    argv = [sys.executable, *argv[1:]]
    argv[argv.index("--host") + 1], argv[argv.index("--port") + 1] = host, str(port)
    return argv


@pytest.fixture
def proxied(live_env, redis_client, tmp_path):
    """deploy/nginx.conf in front of the image's web command in production mode, told (as compose tells it) that
    the proxy's address is the one trusted proxy; -> the proxy's port."""
    env = {**live_env, **LIMITS, "OBS_DEBUG": "0", "DJANGO_SECRET_KEY": "deploy-test-" + "k" * 40,
           "OBS_SSL_REDIRECT": "0", "OBS_TRUSTED_PROXIES": "127.0.0.1"}
    web_port = free_port()
    log = open(tmp_path / "web.log", "wb")
    web = subprocess.Popen(_image_web_argv("127.0.0.1", web_port), cwd=ROOT, env=env, stdout=log, stderr=log)
    main, port = _nginx_conf(tmp_path, [web_port])
    proxy = subprocess.Popen(["nginx", "-c", main], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(web_port)
        wait_port(port)
        yield port
    finally:
        stop(proxy)
        stop(web)


def test_under_make_run_a_rotating_forwarded_for_escapes_neither_the_lockout_nor_the_signup_limit(make_run_web):
    rotating_header_attack(make_run_web)


def test_behind_the_deploy_proxy_a_rotating_forwarded_for_escapes_neither_the_lockout_nor_the_signup_limit(
        proxied):
    rotating_header_attack(proxied)


def test_behind_the_deploy_proxy_each_real_address_has_its_own_limit(proxied):
    """The proxy's X-Forwarded-For is trusted: one address spending its sign-up limit does not spend another's."""
    first, second = Browser(proxied, "127.0.0.21"), Browser(proxied, "127.0.0.22")
    codes = []
    while 429 not in codes and len(codes) <= 2 * SIGNUP_LIMIT:
        codes.append(_signup(first, "203.0.113.9"))
    assert codes[-1] == 429, codes
    assert _signup(second, "203.0.113.9") == 200


@pytest.mark.parametrize("where", ["make_run_web", "proxied"])
def test_guesses_from_many_real_addresses_lock_the_account(where, request):
    port = request.getfixturevalue(where)
    get_user_model().objects.create_user("grace", "grace@example.org", PASSWORD)
    for i in range(ACCOUNT_LIMIT):  # one wrong guess per address: no (account, address) pair reaches its limit
        status, _ = _login(Browser(port, f"127.0.0.{30 + i}"), "wrong")
        assert status in (200, 429), status
    status, text = _login(Browser(port, "127.0.0.99"), PASSWORD)
    assert status == 429 and LOCKED in text, (status, text[:300])
