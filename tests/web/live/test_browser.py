"""One browser test: real uvicorn + real ingest subprocesses, Chromium via Playwright; the curve grows by itself,
and survives a server restart with no gap and no duplicate point."""

import threading
import time

import pytest

from observatory import contract

from ..servers import LAZY_LOADED_JS, PAGE_HOOK, trace_js, wait_ingested, wait_trace

pytestmark = [pytest.mark.browser, pytest.mark.slow]

LOSS = "chart-train-loss"


def test_the_dashboard_curve_grows_live_and_resumes_after_a_server_restart(trainer, servers, new_page, run_id):
    trainer.send("run", name="browser test", config={"lr": 1e-3})
    trainer.send("state", state="training", step=0, detail="")
    for step in range(5):
        trainer.metrics(step, **{contract.M_LOSS: 4.0 - 0.01 * step})

    wait_ingested(run_id, 4)
    servers.wait_web()
    page = new_page()
    page.add_init_script(PAGE_HOOK)
    api_calls = []
    page.on("request", lambda r: "/api/" in r.url and api_calls.append(r.url))
    page.goto(f"{servers.url}/runs/{run_id}/")
    wait_trace(page, LOSS, "x.length === 5")
    page.wait_for_function("() => document.getElementById('stat-conn').textContent === 'live'", timeout=30_000)
    page.evaluate("() => { window.__sameDocument = true; }")
    page.wait_for_function(LAZY_LOADED_JS)
    api_calls.clear()

    # paced like a trainer, so that the page is seen growing while the publisher is still running
    publish = threading.Thread(target=lambda: [
        (trainer.metrics(step, **{contract.M_LOSS: 4.0 - 0.01 * step}), time.sleep(0.02))
        for step in range(5, 60)])
    publish.start()
    wait_trace(page, LOSS, "x.length >= 30")
    publish.join()
    wait_trace(page, LOSS, "x.length === 60")
    assert page.evaluate("() => window.__sameDocument") is True  # no reload
    assert api_calls == []  # pushed over the WebSocket, not polled

    # Server restart: points published while the socket is down arrive by resume, once each.
    servers.stop_web()
    page.wait_for_function("() => document.getElementById('stat-conn').textContent !== 'live'", timeout=30_000)
    for step in range(60, 80):
        trainer.metrics(step, **{contract.M_LOSS: 4.0 - 0.01 * step})
    servers.start_web()
    wait_trace(page, LOSS, "x.length >= 80")
    for step in range(80, 91):
        trainer.metrics(step, **{contract.M_LOSS: 4.0 - 0.01 * step})
    # Step 90 is pushed after everything published before it: once it is drawn, a duplicate would be too.
    wait_trace(page, LOSS, "x.includes(90)")
    assert page.evaluate(trace_js(LOSS)) == list(range(91))
    assert page.evaluate("() => window.__sameDocument") is True
    servers.stop_ingest()
