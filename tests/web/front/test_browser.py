"""The front page live, in Chromium: real ingest + uvicorn, a trainer publishing on the real stream. The featured
run's loss advances without a reload; a loss spike the detector just raised and an annotation just posted appear in
"what is happening", each linking to its step on the chart; no console error; desktop and phone screenshots."""

from __future__ import annotations

import json
import threading
import time
from urllib.parse import parse_qs, urlsplit

import pytest
from django.test import Client

from observatory import contract

from ..accounts.conftest import make_user
from ..dashboard.conftest import in_thread
from ..experiments import records
from ..servers import PAGE_HOOK, wait_ingested

pytestmark = [pytest.mark.browser, pytest.mark.slow]

LOSS_X = ("() => { const d = document.getElementById('front-chart'); const t = d && d.data && "
          "d.data.find((t) => t.name === 'train/loss'); return t ? Array.from(t.x) : null; }")
OVERFLOW_JS = "() => document.documentElement.scrollWidth"


def wait_loss(page, condition: str) -> None:
    page.wait_for_function(f"() => {{ const x = ({LOSS_X})(); return x !== null && ({condition}); }}",
                           timeout=30_000)


def link_window(href: str) -> tuple[str, dict]:
    u = urlsplit(href)
    return u.path, {k: v[0] for k, v in parse_qs(u.query).items()}


def test_the_front_page_shows_the_run_advancing_and_new_moments_live(trainer, servers, new_page, run_id):
    reg = records.registration(run_id)
    records.publish(trainer, reg, name="front hero")
    records.metrics(trainer, reg, range(0, 40))
    trainer.send("heartbeat", step=39, phase="training", tokens=39 * records.TPS, token_budget=records.D,
                 eta_s=95.0, steps_per_s=2.0)
    wait_ingested(run_id, 39)
    member = Client()
    member.force_login(make_user("frontie", "member"))
    servers.wait_web()

    page = new_page(viewport={"width": 1440, "height": 900})
    console = []
    page.on("console", lambda m: console.append((m.type, m.text)))
    page.on("pageerror", lambda e: console.append(("error", str(e))))
    page.add_init_script(PAGE_HOOK)
    try:
        page.goto(servers.url + "/")
        wait_loss(page, "x.length === 40")
        assert page.inner_text("#featured-state") == "training" and page.inner_text("#featured-eta").startswith("≈")
        page.wait_for_function("() => document.getElementById('featured-conn').textContent === 'live'",
                               timeout=30_000)
        page.evaluate("() => { window.__sameDocument = true; }")

        publish = threading.Thread(target=lambda: [(records.metrics(trainer, reg, [s]), time.sleep(0.02))
                                                   for s in range(40, 80)])
        publish.start()
        wait_loss(page, "x.length > 40")  # seen advancing while the trainer still publishes
        publish.join()
        wait_loss(page, "x.includes(79)")

        # a loss spike: the detector raises it in ingest, its frame reaches the page, the moment appears
        spike = 85
        records.metrics(trainer, reg, range(80, spike))
        records.metrics(trainer, reg, [spike], shape=lambda f: 1.8)
        records.metrics(trainer, reg, range(spike + 1, 95))
        item = page.locator("#moments li[data-moment^='anomaly-']", has_text="loss spike").first
        item.wait_for(timeout=30_000)
        path, q = link_window(item.locator("a").get_attribute("href"))
        assert path == f"/runs/{run_id}/" and int(q["from"]) <= spike <= int(q["to"]) and "anomaly" in q
        page.wait_for_function("() => (document.getElementById('front-chart').layout.shapes || [])"
                               f".some((s) => s.x0 === {spike})", timeout=10_000)  # marked on the chart too

        # an annotation posted through the API by a member: its frame brings it in
        def post():
            body = {"title": "spike at 85: a bad batch?", "body": "the <script>x</script> **loader**",
                    "metric": contract.M_LOSS, "step_start": spike - 1, "step_end": spike + 1}
            resp = member.post(f"/api/runs/{run_id}/annotations/", json.dumps(body), content_type="application/json")
            assert resp.status_code == 201, resp.content
            return resp.json()["id"]

        note = in_thread(post)
        item = page.locator(f"#moments li[data-moment='annotation-{note}']")
        item.wait_for(timeout=30_000)
        assert "spike at 85" in item.inner_text() and "0 replies" in item.inner_text()
        path, q = link_window(item.locator("a").get_attribute("href"))
        assert path == f"/runs/{run_id}/" and q["annotation"] == str(note)
        assert int(q["from"]) <= spike - 1 and spike + 1 <= int(q["to"])
        assert page.locator("#moments script").count() == 0
        assert page.evaluate("() => window.__sameDocument") is True  # all of it without a reload
        wait_loss(page, "x.includes(94)")
        page.screenshot(path="/tmp/front-desktop.png", full_page=True)

        # the link opens the chart zoomed on that window
        href = page.locator("#moments li[data-moment^='anomaly-']", has_text="loss spike").first.locator(
            "a").get_attribute("href")
        _, q = link_window(href)
        page.goto(servers.url + href)
        page.wait_for_function("() => { const d = document.getElementById('chart-train-loss'); "
                               "return !!(d && d.layout && d.layout.xaxis && d.layout.xaxis.range); }",
                               timeout=30_000)
        rng = page.evaluate("() => document.getElementById('chart-train-loss').layout.xaxis.range")
        assert [round(x) for x in rng] == [int(q["from"]), int(q["to"])]

        phone = new_page(viewport={"width": 390, "height": 844})
        phone.on("console", lambda m: console.append((m.type, m.text)))
        phone.on("pageerror", lambda e: console.append(("error", str(e))))
        phone.goto(servers.url + "/")
        wait_loss(phone, "x.includes(94)")
        phone.locator(f"#moments li[data-moment='annotation-{note}']").wait_for()
        assert phone.evaluate(OVERFLOW_JS) <= 390
        phone.screenshot(path="/tmp/front-phone.png", full_page=True)
        assert [text for kind, text in console if kind == "error"] == []
    except Exception:
        print("browser console:", *console, sep="\n  ")
        raise
