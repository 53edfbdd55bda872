"""Every time the site shows is UTC and says so, as the charts' wall-time axis is: in a browser whose own zone is not
UTC (New York), the dashboard's events list, the operator panel's commands and the run list show the UTC time with
"UTC", never the browser's local time (the events list and the panel once showed New York's, unlabelled), and so
does the charts' hover on a wall-time axis."""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone

import pytest
from django.test import Client

from observatory import contract

from ..control.live import cookie_for, session
from ..servers import wait_ingested

pytestmark = [pytest.mark.browser, pytest.mark.slow]
T0 = 1_700_000_000.0  # 2023-11-14 22:13:20 UTC: 17:13:20 in New York, and a different day in Tokyo
LOSS = "chart-train-loss"
UTC_TIME = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$")


def test_times_are_utc_and_labelled_in_a_browser_that_is_not_in_utc(trainer, servers, new_page, run_id):
    trainer.send("run", name="utc run", config={}, t=T0)
    trainer.send("state", state="compiling", step=0, detail="", t=T0)
    trainer.send("state", state="training", step=4, detail="", t=T0 + 40)  # two anchors: a wall-time axis
    for step in range(5):
        trainer.metrics(step, **{contract.M_LOSS: 4.0 - 0.1 * step})
    wait_ingested(run_id, 4)
    operator = Client()
    sessionid = session("utc-operator", "operator")
    operator.cookies["sessionid"] = sessionid
    resp = operator.post(f"/api/runs/{run_id}/commands/", json.dumps(
        {"command": "pause", "args": {}, "reason": "a look at the clock"}), content_type="application/json")
    assert resp.status_code == 202, resp.content
    servers.wait_web()

    page = new_page(viewport={"width": 1280, "height": 800}, timezone_id="America/New_York")
    assert page.evaluate("() => new Date(0).getTimezoneOffset()") == 300  # the browser is in New York, not UTC
    page.goto(f"{servers.url}/runs/{run_id}/")
    first = page.locator("#events li time").first
    first.wait_for(timeout=30_000)
    assert first.inner_text().strip() == "2023-11-14 22:14:00 UTC"  # the newest event first
    assert first.get_attribute("datetime").startswith("2023-11-14T22:14:00")
    # the charts' wall-time axis is UTC (its title says so), and so is its hover
    page.click("#x-mode button[value=time]")
    page.wait_for_function(f"() => document.getElementById('{LOSS}').layout.xaxis.title.text === 'wall time (UTC)'")
    plot = page.locator(f"#{LOSS} .u-over").first.bounding_box()
    page.mouse.move(plot["x"] + plot["width"] / 2, plot["y"] + plot["height"] / 2)
    hover = page.locator(f"#{LOSS} .chart-hover:not([hidden])")
    hover.wait_for(timeout=10_000)
    shown = hover.inner_text().splitlines()[0]
    assert UTC_TIME.match(shown) and shown.startswith("2023-11-14 22:13:"), shown  # between the two events

    page.goto(f"{servers.url}/runs/")
    started = page.locator(f"tr:has(a[href='/runs/{run_id}/']) td time").first
    assert started.inner_text().endswith(" UTC"), started.inner_text()

    page.context.add_cookies(cookie_for(servers.url, sessionid))
    page.goto(f"{servers.url}/operate/?run={run_id}")
    sent = page.locator(f"#op-commands tr[data-run='{run_id}'] td[data-label=sent]").first
    sent.wait_for(timeout=30_000)
    shown = sent.inner_text().strip()
    assert UTC_TIME.match(shown), shown
    created = datetime.fromisoformat(json.loads(resp.content)["created_at"])
    assert shown == created.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
