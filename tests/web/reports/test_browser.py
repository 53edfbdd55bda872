"""Reports and embeds in Chromium, on real servers (uvicorn + ingest) and a run publishing to its stream:
- a member writes and publishes a report with a live chart; an anonymous reader watches the chart advance without
  a reload; a moderator hides the report and it is gone for the public;
- a page of another origin (a plain HTTP server on another port) frames the embed and watches it advance; the
  dashboard and the report page still refuse to be framed (their headers, from the real server)."""

from __future__ import annotations

import os
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests
from django.conf import settings
from django.test import Client

from observatory import contract

from ..servers import free_port, wait_ingested
from .conftest import make_user

pytestmark = [pytest.mark.browser, pytest.mark.slow]
SHOTS = os.environ.get("OBS_SHOTS_DIR")  # set: screenshots of the report and the framing page are written there

CHART = ".minichart[data-chart='0']"
LAST_STEP_JS = "(n) => { const c = document.querySelector(\"" + CHART.replace('"', '\\"') + "\"); " \
               "return !!c && Number(c.dataset.lastStep) === n; }"


def _session(username: str, role: str) -> str:
    client = Client()
    client.force_login(make_user(username, role))
    return client.cookies[settings.SESSION_COOKIE_NAME].value


def _open(new_page, url, session=None):
    page = new_page(viewport={"width": 1100, "height": 800})
    page.problems = []
    page.on("console", lambda m: m.type == "error" and page.problems.append(m.text))
    page.on("pageerror", lambda e: page.problems.append(str(e)))
    if session:
        origin = "/".join(url.split("/")[:3])
        page.context.add_cookies([{"name": settings.SESSION_COOKIE_NAME, "value": session, "url": origin}])
    page.goto(url)
    return page


def _shot(page, name):
    if SHOTS:
        page.screenshot(path=os.path.join(SHOTS, f"{name}.png"), full_page=True)


def _train(trainer, steps):
    for step in steps:
        trainer.metrics(step, **{contract.M_LOSS: 4.0 - 0.02 * step})


def _start_run(trainer, run_id, last):
    trainer.send("run", name="reported run", config={})
    trainer.send("state", state="training", step=0, detail="")
    _train(trainer, range(last + 1))
    wait_ingested(run_id, last)


def test_a_member_publishes_a_report_whose_live_chart_advances_for_an_anonymous_reader(trainer, servers, new_page,
                                                                                        run_id):
    _start_run(trainer, run_id, 29)
    member, moderator = _session("rep-member", "member"), _session("rep-moderator", "moderator")
    servers.wait_web()

    author = _open(new_page, f"{servers.url}/reports/new/", member)
    author.fill("#report-title-input", "The first thirty steps")
    author.fill("#report-body", f"Loss falls **steadily**.\n\n{{{{chart run={run_id} series={contract.M_LOSS} "
                                f"steps=0..}}}}\n\nMore soon.")
    author.click("#report-save-publish")
    author.wait_for_url(f"{servers.url}/reports/*/")
    report_url = author.url
    assert "draft" not in author.inner_text("#report-title")

    reader = _open(new_page, report_url)
    assert reader.inner_text("#report-title") == "The first thirty steps"
    assert reader.locator(".report-text strong").first.inner_text() == "steadily"
    reader.wait_for_function(LAST_STEP_JS, arg=29, timeout=30_000)
    reader.evaluate("() => { window.__sameDocument = true; }")
    _train(trainer, range(30, 40))
    reader.wait_for_function(LAST_STEP_JS, arg=39, timeout=30_000)  # live, no reload
    assert reader.evaluate("() => window.__sameDocument") is True
    lines = f"() => document.querySelector(\"{CHART}\").data.filter((t) => t.mode === 'lines').length"
    assert reader.evaluate(lines) == 1
    assert reader.locator(f"{CHART} .uplot canvas").count() == 1
    _shot(reader, "report-anonymous")

    mod = _open(new_page, report_url, moderator)
    mod.fill("#moderation-reason", "off-topic test")
    mod.click("#report-moderate")
    mod.wait_for_selector("#report-hidden")
    assert "off-topic test" in mod.inner_text("#report-hidden")
    assert reader.goto(report_url).status == 404
    assert "The first thirty steps" not in reader.goto(f"{servers.url}/reports/").text()
    for page in (author, mod):
        assert page.problems == [], page.problems
    servers.stop_ingest()


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def test_another_origin_frames_the_live_embed_and_the_dashboard_refuses_to_be_framed(trainer, servers, new_page,
                                                                                     run_id, tmp_path):
    _start_run(trainer, run_id, 29)
    servers.wait_web()
    embed = f"{servers.url}/embed/runs/{run_id}/chart/?series={contract.M_LOSS}&steps=0.."
    (tmp_path / "blog.html").write_text('<!doctype html><title>a blog</title><link rel="icon" href="data:,">'
                                        f'<h1>My post</h1><iframe id="chart" src="{embed}" width="600" '
                                        'height="300"></iframe>')
    port = free_port()
    blog = ThreadingHTTPServer(("127.0.0.1", port), partial(_Quiet, directory=str(tmp_path)))
    threading.Thread(target=blog.serve_forever, daemon=True).start()
    try:
        # the blog is another origin (another port; "localhost", not the site's 127.0.0.1 address)
        page = _open(new_page, f"http://localhost:{port}/blog.html")
        frame = page.frame_locator("#chart")
        frame.locator(CHART).wait_for(timeout=30_000)
        inner = next(f for f in page.frames if "/embed/" in f.url)
        inner.wait_for_function(LAST_STEP_JS, arg=29, timeout=30_000)
        _train(trainer, range(30, 40))
        inner.wait_for_function(LAST_STEP_JS, arg=39, timeout=30_000)
        _shot(page, "embed-on-another-origin")
        assert page.problems == [], page.problems
    finally:
        blog.shutdown()
        blog.server_close()

    framable = requests.get(embed, timeout=10)
    assert "frame-ancestors *" in framable.headers["Content-Security-Policy"]
    assert "X-Frame-Options" not in framable.headers
    for url in (f"{servers.url}/runs/{run_id}/", f"{servers.url}/reports/"):
        resp = requests.get(url, timeout=10)
        assert resp.status_code == 200
        assert "frame-ancestors 'none'" in resp.headers["Content-Security-Policy"], url
        assert resp.headers["X-Frame-Options"] == "DENY", url
    servers.stop_ingest()
