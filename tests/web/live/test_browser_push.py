"""The dashboard on the push tier: nginx + nchan in front of the web server and the relay, as `make run` starts
them. Live points arrive from nchan, a rewind cuts what storage does not keep, and a dropped socket reconnects from
its last message id with no gap and no doubled step."""

import subprocess
import sys

import pytest

from observatory import contract

from ..servers import ROOT, Servers, free_port, stop, trace_js, wait_for, wait_ingested, wait_trace
from .test_relay import Nchan, push_tier_missing

pytestmark = [pytest.mark.browser, pytest.mark.slow]

LOSS = "chart-train-loss"
# Every WebSocket the page opens, for the test to see its URL and to drop it.
RECORD_SOCKETS = """(() => { const WS = window.WebSocket; window.__sockets = [];
  window.WebSocket = function (...a) { const ws = new WS(...a); window.__sockets.push(ws); return ws; };
  window.WebSocket.prototype = WS.prototype;
  Object.assign(window.WebSocket, {OPEN: WS.OPEN, CLOSED: WS.CLOSED}); })();"""


@pytest.fixture
def push_servers(live_env, tmp_path):
    missing = push_tier_missing()
    if missing:
        pytest.skip(f"push tier not installed ({missing}): apt-get install -y nginx-light libnginx-mod-nchan")
    pub_port = free_port()
    env = {**live_env, "OBS_LIVE_PUSH_URL": f"http://127.0.0.1:{pub_port}/pub/runs/"}
    servers = Servers(env)
    nchan = Nchan(tmp_path, web_port=servers.port, pub_port=pub_port)
    relay = subprocess.Popen([sys.executable, "manage.py", "relay", "--block-ms", "100"], cwd=ROOT, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    yield servers, nchan
    stop(relay)
    stop(nchan.proc)
    servers.close()


def test_live_updates_rewinds_and_a_reconnect_through_the_push_tier(trainer, push_servers, new_page, run_id):
    servers, nchan = push_servers
    trainer.send("run", name="push tier", config={})
    for step in range(10):
        trainer.metrics(step, **{contract.M_LOSS: 3.0})
    wait_ingested(run_id, 9)
    servers.wait_web()
    page = new_page()
    page.add_init_script(RECORD_SOCKETS)
    page.goto(f"{nchan.url}/runs/{run_id}/")
    wait_trace(page, LOSS, "x.length === 10")
    assert "/live/runs/" in page.evaluate("() => window.__sockets[0].url")  # nchan, not the hub
    for step in range(10, 20):
        trainer.metrics(step, **{contract.M_LOSS: 3.0})
    wait_trace(page, LOSS, "x.includes(19)")
    trainer.send("rewind", from_step=19, to_step=15)  # the run went back to its step-15 checkpoint
    for step in range(16, 25):
        trainer.metrics(step, **{contract.M_LOSS: 2.0})
    wait_trace(page, LOSS, "x.includes(24)")
    page.evaluate("() => window.__sockets[0].close()")  # the connection drops; the run goes on
    for step in range(25, 30):
        trainer.metrics(step, **{contract.M_LOSS: 2.0})
    wait_trace(page, LOSS, "x.includes(29)")
    reconnect = page.evaluate("() => window.__sockets[window.__sockets.length - 1].url")
    first = page.evaluate("() => window.__sockets[0].url")
    assert len(page.evaluate("() => window.__sockets.map((s) => s.url)")) == 2
    assert reconnect != first and "last_event_id=" in reconnect  # resumed after the last message it had
    wait_for(lambda: page.evaluate(trace_js(LOSS)) == list(range(30)), 10, "one point per step")
    values = page.evaluate(trace_js(LOSS, "y"))
    assert values[:16] == [3.0] * 16 and values[16:] == [2.0] * 14, "the points after the rewind are the new ones"


def test_a_series_outside_the_lite_channel_moves_the_page_to_the_full_one(trainer, push_servers, new_page, run_id):
    servers, nchan = push_servers
    trainer.send("run", name="push tier, full channel", config={})
    for step in range(10):
        trainer.metrics_named(step, {contract.M_LOSS: 3.0, "time/step_s": 0.5})
    wait_ingested(run_id, 9)
    servers.wait_web()
    page = new_page()
    page.add_init_script(RECORD_SOCKETS)
    page.goto(f"{nchan.url}/runs/{run_id}/?chart={contract.M_LOSS}&chart=time/step_s")
    wait_trace(page, "chart-time-step-s", "x.length === 10")
    for step in range(10, 20):
        trainer.metrics_named(step, {contract.M_LOSS: 3.0, "time/step_s": 0.5})
    wait_trace(page, "chart-time-step-s", "x.includes(19)")
    wait_trace(page, LOSS, "x.includes(19)")
    urls = page.evaluate("() => window.__sockets.map((s) => s.url)")
    assert "/lite/" in urls[0] and "/lite/" not in urls[-1]  # lite first, then the full channel
    assert page.evaluate(trace_js("chart-time-step-s")) == list(range(20))
    assert page.evaluate(trace_js(LOSS)) == list(range(20))
