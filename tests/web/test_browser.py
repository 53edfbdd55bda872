"""One browser test: real daphne + real ingest subprocesses, Chromium via Playwright; the curve grows by itself,
and survives a server restart with no gap and no duplicate point."""

import threading
import time

import pytest

from observatory import contract

from .servers import free_port, start_daphne, start_ingest, stop, wait_ingested, wait_port
try:
    from tests.conftest import CHROMIUM_ARGS, chromium_path
except ImportError:  # tests/ is not a package: its conftest is importable as a top-level module
    from conftest import CHROMIUM_ARGS, chromium_path

pytestmark = [pytest.mark.browser, pytest.mark.slow]

COUNT_JS = """() => { const d = document.getElementById('chart-train-loss');
  return d && d.data ? d.data[0].x.length : -1; }"""
STEPS_JS = "() => Array.from(document.getElementById('chart-train-loss').data[0].x)"


def test_the_dashboard_curve_grows_live_and_resumes_after_a_server_restart(trainer, live_env, run_id):
    if chromium_path() is None:
        pytest.skip("no Chromium installed (apt-get install -y chromium); CI installs it")
    sync_api = pytest.importorskip("playwright.sync_api")
    trainer.send("run", name="browser test", config={"lr": 1e-3})
    trainer.send("state", state="training", step=0, detail="")
    for step in range(5):
        trainer.metrics(step, **{contract.M_LOSS: 4.0 - 0.01 * step})

    port = free_port()
    ingest = start_ingest(live_env)
    daphne = start_daphne(port, live_env)
    try:
        wait_ingested(run_id, 4)
        wait_port(port)
        with sync_api.sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
            page = browser.new_page()
            api_calls = []
            page.on("request", lambda r: "/api/" in r.url and api_calls.append(r.url))
            page.goto(f"http://127.0.0.1:{port}/runs/{run_id}/")
            page.wait_for_function(f"() => ({COUNT_JS})() === 5", timeout=20_000)
            page.wait_for_function("() => document.getElementById('stat-conn').textContent === 'live'",
                                   timeout=10_000)
            page.evaluate("() => { window.__sameDocument = true; }")
            api_calls.clear()

            publish = threading.Thread(target=lambda: [
                (trainer.metrics(step, **{contract.M_LOSS: 4.0 - 0.01 * step}), time.sleep(0.02))
                for step in range(5, 60)])
            publish.start()
            page.wait_for_function(f"() => ({COUNT_JS})() >= 30", timeout=20_000)  # grows while publishing
            publish.join()
            page.wait_for_function(f"() => ({COUNT_JS})() === 60", timeout=20_000)
            assert page.evaluate("() => window.__sameDocument") is True  # no reload
            assert api_calls == []  # pushed over the WebSocket, not polled

            # Server restart: points published while the socket is down arrive by resume, once each.
            stop(daphne)
            page.wait_for_function("() => document.getElementById('stat-conn').textContent !== 'live'",
                                   timeout=10_000)
            for step in range(60, 80):
                trainer.metrics(step, **{contract.M_LOSS: 4.0 - 0.01 * step})
            daphne = start_daphne(port, live_env)
            wait_port(port)
            page.wait_for_function(f"() => ({COUNT_JS})() >= 80", timeout=30_000)
            for step in range(80, 90):
                trainer.metrics(step, **{contract.M_LOSS: 4.0 - 0.01 * step})
            page.wait_for_function(f"() => ({COUNT_JS})() >= 90", timeout=20_000)
            time.sleep(0.5)
            assert page.evaluate(STEPS_JS) == list(range(90))
            assert page.evaluate("() => window.__sameDocument") is True
            browser.close()
    finally:
        stop(daphne)
        code = stop(ingest)
    assert code == 0, ingest.stderr.read().decode()[-2000:]
