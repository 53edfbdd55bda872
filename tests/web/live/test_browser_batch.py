"""The dashboard behind the web server `make run` starts (uvicorn, the fan-out hub), with the hub's interval made
long so that updates arrive as coalesced batches: the curve still holds every step once, in order."""

import subprocess
import sys
import threading
import time

import pytest

from observatory import contract

from ..servers import PAGE_HOOK, ROOT, free_port, start_ingest, stop, trace_js, wait_ingested, wait_port, wait_trace

sys.path.insert(0, str(ROOT / "deploy"))
from run_local import web_command  # noqa: E402

pytestmark = [pytest.mark.browser, pytest.mark.slow]

LOSS = "chart-train-loss"


def test_coalesced_batches_draw_every_step_once(trainer, live_env, new_page, run_id):
    env = {**live_env, "OBS_LIVE_MIN_INTERVAL_MS": "700"}  # several ingest pushes per frame: batches
    port = free_port()
    web = subprocess.Popen(web_command("127.0.0.1", port), cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    ingest = start_ingest(env)
    try:
        trainer.send("run", name="batch test", config={})
        for step in range(3):
            trainer.metrics(step, **{contract.M_LOSS: 4.0 - 0.01 * step})
        wait_ingested(run_id, 2)
        wait_port(port)
        page = new_page()
        page.add_init_script(PAGE_HOOK + """
window.__batches = 0;
const _WS2 = window.WebSocket;
window.WebSocket = function (url, protocols) {
  const ws = new _WS2(url, protocols);
  ws.addEventListener("message", (ev) => { if (ev.data.startsWith("[")) window.__batches++; });
  return ws;
};
window.WebSocket.prototype = _WS2.prototype;
Object.assign(window.WebSocket, {CONNECTING: 0, OPEN: 1, CLOSING: 2, CLOSED: 3});
""")
        page.goto(f"http://127.0.0.1:{port}/runs/{run_id}/")
        wait_trace(page, LOSS, "x.length === 3")
        page.wait_for_function("() => document.getElementById('stat-conn').textContent === 'live'", timeout=30_000)
        publish = threading.Thread(target=lambda: [
            (trainer.metrics(step, **{contract.M_LOSS: 4.0 - 0.01 * step}), time.sleep(0.05))
            for step in range(3, 60)])
        publish.start()
        publish.join()
        wait_trace(page, LOSS, "x.includes(59)")
        assert page.evaluate(trace_js(LOSS)) == list(range(60))
        assert page.evaluate("() => window.__batches") > 0  # the frames did travel coalesced
    finally:
        stop(web)
        stop(ingest)
