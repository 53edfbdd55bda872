"""Two browsers on one run (real uvicorn + ingest, Chromium): a member shift-drags across the loss chart and posts
an annotation; an anonymous viewer sees the band appear live, opens its thread from the band and sees a reply
and an edit (with its history) arrive live; a moderator hides it and it leaves the anonymous page. Nothing in the
posted Markdown runs.

With OBS_SHOTS_DIR set, desktop (1280×800) and phone (390×844) screenshots are written there."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client

from observatory import contract

from ..servers import PAGE_HOOK, SETTLED_JS, wait_ingested, wait_trace
from .conftest import make_user

pytestmark = [pytest.mark.browser, pytest.mark.slow]

LOSS = "chart-train-loss"
TITLE = "Loss spike: shard 7 restarted"
BODY = "The loader **restarted** here. <img src=x onerror=alert(1)> [x](javascript:alert(1)) $\\lambda$"
BAND_JS = f"""() => {{ const d = document.getElementById({LOSS!r});
  return !!(d && d.layout && (d.layout.shapes || []).some((s) => s.type === "rect" && s.x1 > s.x0)); }}"""
SHOTS = os.environ.get("OBS_SHOTS_DIR")


def _session(username: str, role: str) -> str:
    client = Client()
    client.force_login(make_user(username, role))
    return client.cookies[settings.SESSION_COOKIE_NAME].value


def _open(new_page, url, session=None, init="", **options):
    page = new_page(**options)
    page.add_init_script(PAGE_HOOK + init)
    page.problems = []
    page.on("dialog", lambda d: (page.problems.append(f"dialog: {d.message}"), d.dismiss()))
    page.on("console", lambda m: m.type == "error" and page.problems.append(m.text))
    page.on("pageerror", lambda e: page.problems.append(str(e)))
    if session:
        origin = "/".join(url.split("/")[:3])  # the cookie for the whole site, not only this page's path
        page.context.add_cookies([{"name": settings.SESSION_COOKIE_NAME, "value": session, "url": origin}])
    page.goto(url)
    wait_trace(page, LOSS, "x.length === 60")
    page.wait_for_function("() => document.getElementById('ann-hint').textContent !== ''", timeout=30_000)
    page.wait_for_function(SETTLED_JS, timeout=30_000)
    return page


def _shot(page, name):
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SHOTS) / f"{name}.png"))


def test_a_member_annotates_live_for_an_anonymous_viewer_who_follows_the_thread(trainer, servers, new_page, run_id):
    trainer.send("run", name="annotated run", config={})
    trainer.send("state", state="training", step=0, detail="")
    for step in range(60):
        # a smooth curve: a real spike would also draw the anomaly log's label where this test clicks
        trainer.metrics(step, **{contract.M_LOSS: 4.0 - 0.02 * step})
    wait_ingested(run_id, 59)
    member, moderator = _session("ann-member", "member"), _session("ann-moderator", "moderator")
    servers.wait_web()
    url = f"{servers.url}/runs/{run_id}/"
    viewer = _open(new_page, url, viewport={"width": 1280, "height": 800})
    author = _open(new_page, url, member, viewport={"width": 1280, "height": 800})

    # the member shift-drags across a range of the loss chart
    box = author.locator(f"#{LOSS} .u-over").first.bounding_box()
    y = box["y"] + box["height"] / 2
    author.keyboard.down("Shift")
    author.mouse.move(box["x"] + box["width"] * 0.45, y)
    author.mouse.down()
    author.mouse.move(box["x"] + box["width"] * 0.62, y, steps=6)
    author.mouse.up()
    author.keyboard.up("Shift")
    form = author.locator("#ann-form")
    form.wait_for(state="visible")
    start, end = (int(form.locator(f"[name={n}]").input_value()) for n in ("step_start", "step_end"))
    assert 0 < start < end < 60
    assert form.locator("[name=metric]").input_value() == contract.M_LOSS
    form.locator("[name=title]").fill(TITLE)
    form.locator("[name=body]").fill(BODY)
    form.locator("input[name=tags][value=spike]").check()
    _shot(author, "desktop-compose")
    form.locator("button[type=submit]").click()
    author.wait_for_selector("#ann-thread h3", state="visible")
    assert author.inner_text("#ann-thread h3") == TITLE

    # the anonymous viewer sees the band appear without a reload, and opens the thread from it
    viewer.evaluate("() => { window.__sameDocument = true; }")
    viewer.wait_for_function(BAND_JS, timeout=10_000)
    viewer.locator(f"#{LOSS} .mark-label", has_text="Loss spike").first.click()
    viewer.wait_for_selector("#ann-thread h3", state="visible")
    assert viewer.inner_text("#ann-thread h3") == TITLE
    body = viewer.locator("#ann-thread .ann-post .ann-body").first
    assert "restarted" in body.inner_text() and "<img src=x onerror=alert(1)>" in body.inner_text()
    assert body.locator("img").count() == 0 and body.locator("a[href^=javascript]").count() == 0
    assert body.locator("span.math").inner_text() == "$\\lambda$"
    assert viewer.locator("#ann-thread textarea[name=reply]").count() == 0  # anonymous: read only

    # the member replies; the reply arrives on the anonymous page live
    author.fill("#ann-thread textarea[name=reply]", "Confirmed in the loader log, see #a1.")
    author.click("#ann-thread .ann-reply button[type=submit]")
    viewer.wait_for_function(
        "() => [...document.querySelectorAll('#ann-thread .ann-replies li')].some((li) => "
        "li.textContent.includes('Confirmed in the loader log'))", timeout=10_000)
    for page in (viewer, author):  # counted once, whichever of the answer and the frame came first
        page.wait_for_selector("#ann-thread h4:has-text('Replies (1)')")
    # the member edits the note; the viewer gets the new text live and can read the earlier version
    author.click("#ann-thread .ann-post .ann-actions button:has-text('Edit')")
    author.fill("#ann-thread .ann-edit textarea[name=body]", "The loader restarted on **shard 7** (edited).")
    author.click("#ann-thread .ann-edit button[type=submit]")
    viewer.wait_for_selector("#ann-thread .ann-post .ann-body:has-text('(edited)')", timeout=10_000)
    viewer.click("#ann-thread .ann-post .ann-meta button:has-text('edited')")
    viewer.wait_for_selector("#ann-thread .ann-history li:has-text('restarted here')")
    _shot(viewer, "desktop-thread-anonymous")
    if SHOTS:
        viewer.emulate_media(color_scheme="dark")
        _shot(viewer, "desktop-thread-anonymous-dark")
        viewer.emulate_media(color_scheme="light")
    _shot(author, "desktop-thread-member")

    # a moderator hides it: gone from the anonymous page, still there (marked) for the moderator
    aid = author.evaluate("() => parseInt(document.querySelector('#ann-list [data-annotation]')"
                          ".dataset.annotation, 10)")
    mod = _open(new_page, f"{url}?annotation={aid}", moderator, viewport={"width": 390, "height": 844},
                is_mobile=True, has_touch=True)
    mod.wait_for_selector("#ann-thread h3", state="visible")
    _shot(mod, "phone-thread-moderator")
    mod.click("#ann-thread .ann-post .ann-actions button:has-text('Hide')")
    mod.fill("#ann-thread .ann-ask input[name=reason]", "off-topic test")
    mod.click("#ann-thread .ann-ask button[type=submit]")
    mod.wait_for_selector("#ann-thread .ann-marker:has-text('off-topic test')")
    viewer.wait_for_function(f"() => !({BAND_JS})()", timeout=10_000)
    viewer.wait_for_selector("#ann-thread", state="hidden")
    _shot(mod, "phone-thread-hidden-moderator")
    if SHOTS:  # the chart under it: the permalink zoomed on the note, drawn grey (hidden) for the moderator
        mod.click("#ann-close")
        mod.locator(f"#{LOSS}").scroll_into_view_if_needed()
        _shot(mod, "phone-chart-moderator")
    assert viewer.evaluate("() => window.__sameDocument") is True
    for page in (viewer, author, mod):
        assert page.problems == [], page.problems
    servers.stop_ingest()


PLOT_TOP = f"() => Obs.figureBox(document.getElementById({LOSS!r})).top"


def test_a_charts_first_label_is_drawn_in_the_room_kept_above_the_plot(trainer, servers, new_page, run_id):
    """A chart drawn with no marker label gets its first one (a note posted while the page is open): the label is
    drawn into the room kept above the plot, clickable, the plot area where it was (room that came with the first
    label would move every chart's plot)."""
    trainer.send("run", name="first label", config={})
    trainer.send("state", state="training", step=0, detail="")
    for step in range(60):
        trainer.metrics(step, **{contract.M_LOSS: 4.0 - 0.02 * step})
    wait_ingested(run_id, 59)
    member = _session("label-member", "member")
    servers.wait_web()
    page = _open(new_page, f"{servers.url}/runs/{run_id}/", member, "", viewport={"width": 1280, "height": 800})
    page.wait_for_function("() => performance.getEntriesByName('obs-charts-drawn').length > 0", timeout=30_000)
    assert page.evaluate(f"() => document.querySelectorAll('#{LOSS} .mark-label').length") == 0
    top = page.evaluate(PLOT_TOP)

    status = page.evaluate(f"""async () => (await fetch('/api/runs/{run_id}/annotations/', {{method: 'POST',
      credentials: 'same-origin', headers: {{'Content-Type': 'application/json',
      'X-CSRFToken': document.querySelector('#ann-panel input[name=csrfmiddlewaretoken]').value}},
      body: JSON.stringify({{title: 'Loader restarted', body: 'shard 7', tags: ['spike'],
                            metric: {contract.M_LOSS!r}, step_start: 20, step_end: 30}})}})).status""")
    assert status == 201
    label = page.locator(f"#{LOSS} .mark-label", has_text="Loader restarted").first
    label.wait_for(state="visible", timeout=10_000)
    assert page.evaluate(PLOT_TOP) == top, "the plot area moved"
    box, plot = label.bounding_box(), page.locator(f"#{LOSS} .u-over").first.bounding_box()
    assert box["y"] + box["height"] <= plot["y"] + 1, (box, plot)  # in the room above the plot
    label.click()
    page.wait_for_selector("#ann-thread h3", state="visible")
    assert page.inner_text("#ann-thread h3") == "Loader restarted"
    assert page.problems == [], page.problems
    servers.stop_ingest()


def test_the_threads_buttons_react_quote_and_delete(trainer, servers, new_page, run_id):
    """The thread's buttons (rendered by the server, wired by the page): a reaction is pressed and counted, Quote puts
    the note's link in the reply, and the author's Delete, confirmed inline, takes the note away."""
    trainer.send("run", name="thread buttons", config={})
    trainer.send("state", state="training", step=0, detail="")
    for step in range(60):
        trainer.metrics(step, **{contract.M_LOSS: 4.0 - 0.02 * step})
    wait_ingested(run_id, 59)
    member = _session("buttons-member", "member")
    servers.wait_web()
    page = _open(new_page, f"{servers.url}/runs/{run_id}/", member, "", viewport={"width": 1280, "height": 800})
    aid = page.evaluate(f"""async () => (await (await fetch('/api/runs/{run_id}/annotations/', {{method: 'POST',
      credentials: 'same-origin', headers: {{'Content-Type': 'application/json',
      'X-CSRFToken': document.querySelector('#ann-panel input[name=csrfmiddlewaretoken]').value}},
      body: JSON.stringify({{title: 'Buttons', body: 'press them', tags: ['spike'], step_start: 20,
                            step_end: 30}})}})).json()).id""")
    page.wait_for_selector(f"#ann-list [data-annotation='{aid}']", state="attached")
    page.evaluate(f"() => Obs.annotations.openThread({aid})")
    page.wait_for_selector("#ann-thread h3", state="visible")
    page.click("#ann-thread .ann-post button.ann-react[data-kind='+1']")
    page.wait_for_selector("#ann-thread button.ann-react.on[data-kind='+1'][aria-pressed=true]:has-text('+1 1')")
    page.click("#ann-thread .ann-actions button:has-text('Quote')")
    assert page.input_value("#ann-thread textarea[name=reply]") == f"#a{aid} "
    assert page.problems == [], page.problems
    page.click("#ann-thread .ann-actions button:has-text('Delete')")
    page.click("#ann-thread .ann-ask button[type=submit]")
    page.wait_for_selector("#ann-thread", state="hidden")  # a deleted note is gone for all but moderators
    page.wait_for_selector(f"#ann-list [data-annotation='{aid}']", state="detached")
    servers.stop_ingest()
