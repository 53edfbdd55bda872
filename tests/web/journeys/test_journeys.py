"""Members, moderators, operators and other sites through the front door of `make run`'s stack (push tier on and
off: tests/web/journeys/conftest.py): every write a real form or a page's own fetch, with the browser's Origin.
  - the operator panel: every command of the contract sent from the panel and applied by the trainer (first: the
    others need a stored run, not a live one, and its last command stops the run);
  - a thread: a member annotates, replies and reacts; a moderator hides it and the public no longer gets it;
  - a report: a member writes and publishes it, an anonymous reader opens it;
  - an embed framed by a page of another origin draws the run's curve."""

from __future__ import annotations

import http.server
import threading
import urllib.error
import urllib.request

import pytest

from tests.support import wait_for
from tests.web.control.live import command_row

pytestmark = [pytest.mark.browser, pytest.mark.slow]
PASSWORD = "an unguessable passphrase 42"
USERS = {"mia": "member", "mod": "moderator", "olga": "operator"}
# a budget the module never reaches: the run is still training when the operator journey steers it (the
# first journey below; its last command stops the run, so the trainer does not step through the rest)
TOKEN_BUDGET = 100_000_000


@pytest.fixture(scope="module")
def people(stack):
    stack.manage("shell", "-c", "from django.contrib.auth.models import User\n" + "\n".join(
        f"User.objects.create_user({name!r}, '{name}@example.org', {PASSWORD!r})" for name in USERS))
    for name, role in USERS.items():
        stack.manage("grant", name, role)
    wait_for(lambda: _status(f"{stack.url}/api/runs/{stack.run_id}/") == 200, 240, f"run {stack.run_id} stored")
    return USERS


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return 0


def _logged_in(new_page, stack, name, **options):
    page = new_page(**options)
    page.problems = []
    page.on("console", lambda m: m.type == "error" and page.problems.append(m.text))
    page.on("pageerror", lambda e: page.problems.append(str(e)))
    page.goto(f"{stack.url}/accounts/login/")
    page.fill("#id_username", name)
    page.fill("#id_password", PASSWORD)
    page.click("form:not(.inline) button[type=submit]")
    page.wait_for_selector("[data-testid=signed-in-as]")
    return page


FETCH = """async ([method, path, body]) => {
  const token = (document.cookie.match(/csrftoken=([^;]+)/) || [])[1] || "";
  const r = await fetch(path, {method, headers: {"Content-Type": "application/json", "X-CSRFToken": token},
                               body: body === null ? undefined : JSON.stringify(body)});
  return {status: r.status, body: r.headers.get("content-type") === "application/json" ? await r.json() : null};
}"""


def _call(page, method, path, body=None):
    return page.evaluate(FETCH, [method, path, body])


# Each command with what its form needs; the trainer (tests/tiny.py WEB_TINY, faults allowed) applies every one.
COMMANDS = [("pause", {}, False), ("resume", {}, False), ("checkpoint", {}, False),
            ("set-lr-multiplier", {"#op-arg-value": "0.5"}, False),
            ("set-token-budget", {"#op-arg-tokens": "200000000"}, False), ("set-mixture", {}, False),
            ("inject-fault", {}, False), ("rollback", {}, True), ("stop", {}, True)]


def test_an_operator_sends_every_command_from_the_panel(stack, people, new_page):
    olga = _logged_in(new_page, stack, "olga")
    olga.goto(f"{stack.url}/operate/?run={stack.run_id}")
    olga.wait_for_function("() => document.getElementById('op-conn').textContent === 'live'", timeout=60_000)
    state = f"document.querySelector('#op-runs tr[data-run=\"{stack.run_id}\"] .state')"
    olga.wait_for_function(f"() => {state} && {state}.textContent === 'training'", timeout=300_000)
    for command, fill, confirm in COMMANDS:
        olga.click(f'#op-buttons button[data-cmd="{command}"]')
        if command == "rollback":  # the checkpoint the `checkpoint` command wrote
            olga.wait_for_function("() => document.querySelectorAll('#op-arg-step option[value]').length > 0",
                                   timeout=60_000)
        for selector, value in fill.items():
            olga.fill(selector, value)
        olga.fill("#op-reason", f"front door: {command}")
        if confirm:
            olga.check("#op-confirm")
        olga.click("#op-send")
        olga.wait_for_selector("#op-form", state="hidden", timeout=60_000)  # the web took it
        row = command_row(stack.run_id, command)
        olga.wait_for_function(f"() => {{ const r = {row}; return r && ['applied', 'rejected', 'timeout']"
                               f".includes(r.dataset.outcome); }}", timeout=120_000)
        outcome = olga.evaluate(f"() => ({row}).dataset.outcome + ': ' + ({row}).textContent")
        assert outcome.startswith("applied"), outcome
    olga.wait_for_function(f"() => {state}.textContent === 'stopped'", timeout=120_000)
    assert olga.problems == []


def test_a_thread_is_written_by_members_and_hidden_by_a_moderator(stack, people, new_page):
    mia = _logged_in(new_page, stack, "mia")
    mia.goto(f"{stack.url}/runs/{stack.run_id}/")
    made = _call(mia, "POST", f"/api/runs/{stack.run_id}/annotations/",
                 {"title": "Spike here?", "body": "the *loader* restarted", "step_start": 0})
    assert made["status"] == 201, made
    aid = made["body"]["id"]
    reply = _call(mia, "POST", f"/api/annotations/{aid}/replies/", {"body": "same on shard 3"})
    assert reply["status"] == 201, reply
    react = _call(mia, "POST", f"/api/annotations/{aid}/reactions/", {"kind": "same"})
    assert react["status"] in (200, 201), react
    public = f"{stack.url}/api/annotations/{aid}/"
    assert _status(public) == 200

    mod = _logged_in(new_page, stack, "mod")
    mod.goto(f"{stack.url}/runs/{stack.run_id}/")
    hidden = _call(mod, "POST", f"/api/annotations/{aid}/moderation/", {"action": "hide", "reason": "test"})
    assert hidden["status"] == 200, hidden
    assert _status(public) == 404
    with urllib.request.urlopen(f"{stack.url}/api/runs/{stack.run_id}/annotations/", timeout=30) as r:
        assert b"Spike here?" not in r.read()
    assert mia.problems == [] and mod.problems == []


def test_a_member_publishes_a_report_an_anonymous_reader_opens(stack, people, new_page):
    mia = _logged_in(new_page, stack, "mia")
    mia.goto(f"{stack.url}/reports/new/")
    mia.fill("#report-title-input", "Front door report")
    mia.fill("#report-body", f"Loss falls.\n\n{{{{chart run={stack.run_id} series=train/loss steps=0..}}}}")
    mia.click("#report-save-publish")
    mia.wait_for_url(f"{stack.url}/reports/*/")
    reader = new_page()
    assert reader.goto(mia.url).status == 200
    assert reader.inner_text("#report-title") == "Front door report"
    assert mia.problems == []


def test_a_page_of_another_origin_embeds_the_live_chart(stack, people, new_page):
    oembed = f"{stack.url}/oembed?url={stack.url}/runs/{stack.run_id}/&format=json"
    with urllib.request.urlopen(oembed, timeout=30) as r:
        import json

        html = json.loads(r.read())["html"]

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            body = f"<!doctype html><title>a blog</title><h1>Our run</h1>{html}".encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    blog = http.server.ThreadingHTTPServer(("127.0.0.2", 0), Page)  # another origin: another host and port
    threading.Thread(target=blog.serve_forever, daemon=True).start()
    try:
        page = new_page()
        problems = []
        page.on("console", lambda m: m.type == "error" and problems.append(m.text))
        page.goto(f"http://127.0.0.2:{blog.server_port}/")
        frame = page.frame_locator("iframe")
        frame.locator(".minichart .uplot canvas").first.wait_for(timeout=60_000)
        link = frame.locator(".embed-caption a").get_attribute("href")
        assert link.startswith(f"{stack.url}/runs/{stack.run_id}/")
        assert problems == []
    finally:
        blog.shutdown()
