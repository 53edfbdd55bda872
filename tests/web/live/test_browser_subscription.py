"""What a dashboard's socket carries: the series the page shows (its resume subscribes them: webapp/live/hub.py's
variants), not every series the run publishes, so a default view parses only what it draws; a chart added from the
picker subscribes its series and draws its live points."""

import pytest

from observatory import contract

from ..servers import trace_js, wait_ingested, wait_trace

pytestmark = [pytest.mark.browser, pytest.mark.slow]

LOSS, PICKED = "chart-train-loss", "chart-time-step-s"
OFF_VIEW = "time/step_s"  # a series no default chart, panel or header shows
# Every update frame's series names, as the page's socket received them (window.__names), and whether a backfill
# came (window.__backfilled: the hub answered the page's first resume, so its subscription is in effect; until then,
# or RESUME_WAIT_S at most, a new socket's live frames carry every series, which a loaded box can reach).
RECORD_NAMES = """(() => { const WS = window.WebSocket; window.__names = new Set(); window.__backfilled = false;
  window.WebSocket = function (...a) {
    const ws = new WS(...a);
    ws.addEventListener("message", (ev) => { const m = JSON.parse(ev.data);
      for (const f of Array.isArray(m) ? m : [m]) {
        if (f.type === "backfill") window.__backfilled = true;
        if (f.type === "update") Object.keys(f.series || {}).forEach((n) => window.__names.add(n));
      } });
    return ws;
  };
  window.WebSocket.prototype = WS.prototype;
  Object.assign(window.WebSocket, {CONNECTING: 0, OPEN: 1, CLOSING: 2, CLOSED: 3}); })();"""


def test_a_default_view_receives_only_its_series_and_a_picked_chart_gets_its_live_points(trainer, servers, new_page,
                                                                                          run_id):
    def step(s):
        trainer.metrics_named(s, {contract.M_LOSS: 3.0 - 0.01 * s, OFF_VIEW: 0.5 + 0.001 * s})

    trainer.send("run", name="subscription", config={})
    trainer.send("state", state="training", step=0, detail="")
    for s in range(5):
        step(s)
    wait_ingested(run_id, 4)
    servers.wait_web()
    page = new_page()
    page.add_init_script(RECORD_NAMES)
    page.goto(f"{servers.url}/runs/{run_id}/")
    wait_trace(page, LOSS, "x.length === 5")
    page.wait_for_function("() => document.getElementById('stat-conn').textContent === 'live' && window.__backfilled",
                           timeout=30_000)
    page.evaluate("() => window.__names.clear()")
    for s in range(5, 10):
        step(s)
    wait_trace(page, LOSS, "x.includes(9)")
    names = page.evaluate("() => [...window.__names]")
    assert contract.M_LOSS in names and OFF_VIEW not in names, names

    page.fill("#metric-search", OFF_VIEW)
    page.wait_for_function("(n) => [...document.getElementById('metric-picker').options].some((o) => o.value === n)",
                           arg=OFF_VIEW)
    page.select_option("#metric-picker", OFF_VIEW)
    page.evaluate("() => { window.__backfilled = false; }")
    page.click("#metric-add")
    wait_trace(page, PICKED, "x.length === 10")  # its history
    page.wait_for_function("() => window.__backfilled", timeout=30_000)  # its resume answered: subscribed
    for s in range(10, 15):
        step(s)
    wait_trace(page, PICKED, "x.includes(14)")  # and its live points
    wait_trace(page, LOSS, "x.includes(14)")
    assert page.evaluate(trace_js(PICKED)) == list(range(15))
    assert OFF_VIEW in page.evaluate("() => [...window.__names]")
