"""Journeys through the front door of the stack `make run` starts (tests/web/journeys/conftest.py), with the push
tier and without: a new member signs up by the mailed link, logs in and annotates the run; shared links (the
mail's, og:url, og:image, oEmbed) carry the port and load; a client's wrong passwords lock out that client only.

On the landed nginx config (`proxy_set_header Host $host`) every form POST behind the push tier answered 403
("Origin checking failed"), links pointed at port 80, and every client was 127.0.0.1 to the web server."""

from __future__ import annotations

import json
import re
import sys
import urllib.parse
import urllib.request
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.support import wait_for

from ..servers import sign_up
from .conftest import Browserless

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "deploy"))
from push_tier import front_door_problem  # noqa: E402

pytestmark = [pytest.mark.browser, pytest.mark.slow]
PASSWORD = "an unguessable passphrase 42"
# 50 steps of WEB_TINY's 4 x 32 tokens: these journeys need a stored run with points (its page, preview and
# embed), not a live one; the trainer then exits and leaves the CPU to the rest of the module.
TOKEN_BUDGET = 50 * 4 * 32


class Meta(HTMLParser):
    def __init__(self):
        super().__init__()
        self.meta: dict[str, str] = {}
        self.links: dict[str, str] = {}

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "meta" and (a.get("property") or a.get("name")):
            self.meta[a.get("property") or a.get("name")] = a.get("content", "")
        if tag == "link" and a.get("type"):
            self.links[a["type"]] = a.get("href", "")


def _get(url: str) -> tuple[int, str, bytes]:
    with urllib.request.urlopen(url, timeout=30) as r:
        return r.status, r.headers.get("Content-Type", ""), r.read()


def _run_stored(stack) -> bool:
    try:
        return _get(f"{stack.url}/api/runs/{stack.run_id}/")[0] == 200
    except OSError:
        return False


def test_a_form_posted_from_the_site_itself_passes_its_checks(stack):
    assert front_door_problem(stack.url) is None
    # the same door by another name (localhost, not OBS_PUBLIC_URL's 127.0.0.1): the Host must keep its port
    assert front_door_problem(stack.url.replace("127.0.0.1", "localhost")) is None
    status, headers, _ = Browserless(stack.url).request("GET", "/")
    assert status == 200
    assert "nginx/" not in headers.get("Server", "")  # no version named behind the push tier


def test_a_new_member_signs_up_by_the_mailed_link_logs_in_and_annotates(stack, new_page):
    page = new_page()
    problems = []
    page.on("console", lambda m: m.type == "error" and problems.append(m.text))
    sign_up(page, stack.url, "ada", "ada@example.org", "Ada L.", PASSWORD)
    link = wait_for(lambda: stack.mailed_link(r"http://\S+/accounts/confirm/\S+"), 60, "the confirmation mail")
    assert link.startswith(stack.url + "/")  # the port included: the link works as mailed
    page.goto(link)
    page.wait_for_selector("text=Your email address is confirmed")
    page.fill("#id_username", "ada")
    page.fill("#id_password", PASSWORD)
    page.click("form:not(.inline) button[type=submit]")
    assert page.wait_for_selector("[data-testid=signed-in-as]").inner_text() == "Ada L."

    wait_for(lambda: _run_stored(stack), 120, f"ingest to store run {stack.run_id}")
    page.goto(f"{stack.url}/runs/{stack.run_id}/")
    created = page.evaluate("""async (run) => {
      const token = (document.cookie.match(/csrftoken=([^;]+)/) || [])[1] || "";
      const r = await fetch(`/api/runs/${run}/annotations/`, {method: "POST", headers: {
        "Content-Type": "application/json", "X-CSRFToken": token},
        body: JSON.stringify({title: "Through the front door", body: "a **first** note", step_start: 0})});
      return {status: r.status, body: await r.json()};
    }""", stack.run_id)
    assert created["status"] == 201, created
    status, _, body = _get(f"{stack.url}/api/runs/{stack.run_id}/annotations/")  # anonymous
    assert status == 200 and "Through the front door" in body.decode()
    assert problems == []


def test_shared_links_carry_the_port_and_load(stack):
    wait_for(lambda: _run_stored(stack), 120, f"ingest to store run {stack.run_id}")
    _, _, html = _get(f"{stack.url}/runs/{stack.run_id}/")
    meta = Meta()
    meta.feed(html.decode())
    assert meta.meta["og:url"] == f"{stack.url}/runs/{stack.run_id}/"
    for key in ("og:image", "twitter:image"):
        assert meta.meta[key].startswith(f"{stack.url}/runs/{stack.run_id}/preview.png"), meta.meta[key]
        status, ctype, data = _get(meta.meta[key])
        assert status == 200 and ctype == "image/png" and data[:4] == b"\x89PNG"
    oembed = urllib.parse.urljoin(stack.url, meta.links["application/json+oembed"])
    status, _, body = _get(oembed)
    doc = json.loads(body)
    assert doc["provider_url"] == stack.url + "/"
    src = re.search(r'src="([^"]+)"', doc["html"]).group(1).replace("&amp;", "&")
    assert src.startswith(f"{stack.url}/embed/runs/{stack.run_id}/chart/")
    assert _get(src)[0] == 200


def test_wrong_passwords_from_one_address_lock_out_that_address_only(stack):
    """Per (account, address) after OBS_LOGIN_FAILURE_LIMIT (5) wrong passwords; the account-wide rule (20) is not
    reached here. Through the push tier's nginx each client keeps its own address (127.0.0.N)."""
    stack.manage("shell", "-c", "from django.contrib.auth.models import User; "
                 f"User.objects.create_user('grace', 'grace@example.org', {PASSWORD!r})")
    guesser = Browserless(stack.url, "127.0.0.2")
    codes = [guesser.log_in("grace", f"wrong {i}") for i in range(6)]
    assert codes[-1] == 429, codes
    owner = Browserless(stack.url, "127.0.0.3")
    assert owner.log_in("grace", PASSWORD) == 302


def test_rate_limits_count_each_client_address(stack):
    """Sign-ups are limited per client address (10 a minute): one address past it gets 429s, another does not."""
    busy = Browserless(stack.url, "127.0.0.4")
    busy.request("GET", "/accounts/signup/")
    codes = []
    while 429 not in codes:  # the limit counts in windows of the clock: a window may end on the way (<= 2 windows)
        codes.append(busy.request("POST", "/accounts/signup/", {"username": "x"})[0])
        assert len(codes) <= 25, codes
    other = Browserless(stack.url, "127.0.0.5")
    other.request("GET", "/accounts/signup/")
    assert other.request("POST", "/accounts/signup/", {"username": "x"})[0] == 200  # the form's errors, not 429
