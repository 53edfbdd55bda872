"""The product as `make run` starts it (deploy/run_local.py start_stack: web, ingest, Celery, the trainer, and the
push tier when nginx + nchan are installed), once with the push tier and once without, each on a database and a
data folder of its own: the journeys below go through its front door as a browser does."""

from __future__ import annotations

import http.client
import http.cookies
import os
import re
import subprocess
import sys
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support import free_port, wait_for
from tests.tiny import WEB_TINY, TinyConfigs

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "deploy"))
from run_local import Supervisor, answers, push_tier_missing, start_stack  # noqa: E402

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@dataclass
class Stack:
    url: str
    env: dict
    var: Path
    run_id: str
    push: bool
    sup: Supervisor = field(repr=False)

    def manage(self, *args: str) -> str:
        """`manage.py <args>` on this stack's database."""
        out = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=self.env, capture_output=True,
                             text=True)
        assert out.returncode == 0, out.stderr
        return out.stdout

    def mailed_link(self, pattern: str) -> str | None:
        for f in sorted((self.var / "mail").glob("*.log")) if (self.var / "mail").exists() else ():
            m = re.search(pattern, f.read_text())
            if m:
                return m.group(0)
        return None


@pytest.fixture(scope="module", params=["push", "hub"])
def stack(request, redis_url, tmp_path_factory):
    push = request.param == "push"
    if push and push_tier_missing():
        pytest.skip(f"push tier not installed ({push_tier_missing()}): apt-get install -y nginx-light "
                    "libnginx-mod-nchan (CI installs them)")
    var = tmp_path_factory.mktemp(f"make-run-{request.param}")
    # The module's TOKEN_BUDGET: the trainer steps (and ingest stores) as fast as the CPU allows until it is spent,
    # so a module that needs no live run takes a budget that ends (the trainer then exits 0 and the web stays up).
    config = TinyConfigs(var)(**WEB_TINY, train={"token_budget": request.module.TOKEN_BUDGET})
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "OBS_EMAIL_DIR", "OBS_PUBLIC_URL",
                                                             "OBS_TESTING", "DJANGO_SETTINGS_MODULE")}
    env["REDIS_URL"] = redis_url
    sup = Supervisor()
    run_id = f"journey-{request.param}-{os.getpid()}"
    try:
        url = start_stack(sup, env, "127.0.0.1", free_port(), run_id, str(config), var, push=push)
        wait_for(lambda: answers(url), 120, f"the site at {url} to answer")
        yield Stack(url, env, var, run_id, push, sup)
    finally:
        sup.stop()


class Browserless:
    """A client that speaks to the front door as a browser does, from a source address of its choice (127.0.0.N):
    cookies kept, the CSRF token sent back, Origin set on every POST."""

    def __init__(self, url: str, source: str = "127.0.0.1"):
        u = urllib.parse.urlparse(url)
        self.url, self.host, self.port, self.source = url, u.hostname, u.port, source
        self.cookies: dict[str, str] = {}

    def request(self, method: str, path: str, form: dict | None = None) -> tuple[int, dict, bytes]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=30, source_address=(self.source, 0))
        headers = {"Cookie": "; ".join(f"{k}={v}" for k, v in self.cookies.items())}
        body = None
        if method == "POST":
            form = {"csrfmiddlewaretoken": self.cookies.get("csrftoken", ""), **(form or {})}
            body = urllib.parse.urlencode(form)
            headers.update({"Origin": self.url, "Referer": self.url + path,
                            "Content-Type": "application/x-www-form-urlencoded"})
        try:
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            for value in resp.headers.get_all("Set-Cookie") or ():
                c = http.cookies.SimpleCookie(value)
                self.cookies.update({k: m.value for k, m in c.items()})
            return resp.status, dict(resp.headers), data
        finally:
            conn.close()

    def log_in(self, username: str, password: str) -> int:
        self.request("GET", "/accounts/login/")
        return self.request("POST", "/accounts/login/", {"username": username, "password": password})[0]
