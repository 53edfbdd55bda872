"""Real server processes for browser and end-to-end tests (the web server `make run` runs — uvicorn with
deploy/run_local.py's flags — and ingest, on the test database and Redis),
and the waits every such test needs: each polls a real condition; its timeout only bounds a failure."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import tempfile
import urllib.request
from contextlib import contextmanager
from pathlib import Path

from deploy.run_local import web_command
from tests.support import free_port, stop, wait_for, wait_port  # noqa: F401 (re-exported for the web tests)

ROOT = Path(__file__).resolve().parents[2]


def start_web(port: int, env: dict, log=subprocess.DEVNULL) -> subprocess.Popen:
    """The site as `make run` serves it (deploy/run_local.py web_command: uvicorn, its flags), on 127.0.0.1:port;
    its stderr to `log` (a file: a pipe nobody reads fills at 64 KB and stops the process at its next log line)."""
    return subprocess.Popen(web_command("127.0.0.1", port, "uvicorn"), cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=log)


def start_ingest(env: dict, log=subprocess.DEVNULL) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "manage.py", "ingest", "--block-ms", "100"], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=log)


class Servers:
    """ingest + web server subprocesses sharing the test database and Redis (the `servers` fixture). Their stderr
    goes to temporary files (`tail()` reads one): a pipe would stop ingest once 64 KB of log lines were unread."""

    def __init__(self, env: dict):
        self.env = env
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.logs = {"ingest": tempfile.TemporaryFile(), "web": tempfile.TemporaryFile()}
        self.ingest = start_ingest(env, self.logs["ingest"])
        self.web = start_web(self.port, env, self.logs["web"])

    def tail(self, which: str, chars: int = 2000) -> str:
        """The end of the stderr of "ingest" or "web"."""
        f = self.logs[which]
        f.seek(0)
        return f.read().decode(errors="replace")[-chars:]

    def wait_web(self) -> None:
        wait_port(self.port, proc=self.web)

    def stop_web(self) -> None:
        stop(self.web)

    def start_web(self) -> None:
        self.web = start_web(self.port, self.env, self.logs["web"])
        self.wait_web()

    def stop_ingest(self) -> int:
        """Stop ingest; AssertionError with its stderr unless it exited cleanly (0)."""
        code = stop(self.ingest)
        assert code == 0, self.tail("ingest")
        return code

    def close(self) -> None:
        stop(self.web)
        stop(self.ingest)
        for f in self.logs.values():
            f.close()


def wait_ingested(run_id: str, last_step: int, timeout: float = 300) -> None:
    """Until ingest (a subprocess) has stored the run up to `last_step` (the timeout bounds a hang: ingest's start-up
    alone can take a minute on two busy cores)."""
    from webapp.runs.models import Run

    wait_for(lambda: Run.objects.filter(pk=run_id, last_step=last_step).exists(), timeout,
             f"ingest to store run {run_id} up to step {last_step}")


def live_run(trainer, servers, run_id: str, name: str, steps: int = 200):
    """A run of `name` in training with `steps` steps of a falling loss ingested and the web server up; returns
    step(s), which publishes one more."""
    from observatory import contract

    def step(s):
        trainer.metrics(s, **{contract.M_LOSS: 4.0 - 0.005 * s})

    trainer.send("run", name=name, config={})
    trainer.send("state", state="training", step=0, detail="")
    for s in range(steps):
        step(s)
    wait_ingested(run_id, steps - 1)
    servers.wait_web()
    return step


def get_json(url: str, timeout: float = 5):
    """GET `url` as JSON; None while the server does not answer with JSON (not up yet, restarting)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return json.loads(resp.read())
    except (OSError, ValueError, http.client.HTTPException):
        return None


# ---------------------------------------------------------------------------------------------- pages
def page_errors(page) -> list[str]:
    """The page's uncaught exceptions and console errors, appended as they happen (a test asserts none came)."""
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    return errors


@contextmanager
def logged_web(env: dict, log: Path):
    """The web server as `make run` starts it (web_command) on a free port, its output written to `log`; yields the
    port once it listens, stops the server after."""
    port = free_port()
    with open(log, "wb") as out:
        proc = subprocess.Popen(web_command("127.0.0.1", port), cwd=ROOT, env=env, stdout=out, stderr=out)
        try:
            wait_port(port, proc=proc)
            yield port
        finally:
            stop(proc)


# Installed before the dashboard's own scripts: counts what a test must wait for instead of sleeping. A counter is
# bumped in a task queued after the page's own handler ran, so "counted" means "handled".
PAGE_HOOK = """
window.__obs = {resumes: 0, backfills: 0, fetching: 0};
const _WS = window.WebSocket;
window.WebSocket = function (url, protocols) {
  const ws = protocols ? new _WS(url, protocols) : new _WS(url);
  const send = ws.send.bind(ws);
  ws.send = (data) => {
    try { if (JSON.parse(data).type === "resume") window.__obs.resumes++; } catch (e) {}
    return send(data);
  };
  ws.addEventListener("message", (ev) => {
    try { if (JSON.parse(ev.data).type === "backfill") setTimeout(() => window.__obs.backfills++, 0); } catch (e) {}
  });
  return ws;
};
window.WebSocket.prototype = _WS.prototype;
Object.assign(window.WebSocket, {CONNECTING: 0, OPEN: 1, CLOSING: 2, CLOSED: 3});
const _fetch = window.fetch;
window.fetch = function (...args) {
  window.__obs.fetching++;
  return _fetch.apply(this, args).finally(() => setTimeout(() => window.__obs.fetching--, 0));
};
"""
# Every resume answered, no API request in flight: the page has loaded what it shows and is only listening.
SETTLED_JS = ("() => window.__obs.resumes > 0 && window.__obs.resumes === window.__obs.backfills "
              "&& window.__obs.fetching === 0")
# The scripts loaded after first paint (annotations) have made their one first request (their notes): a test that
# asserts nothing is polled counts requests from here.
LAZY_LOADED_JS = "() => !!(window.Obs && Obs.annotations && Obs.annotations.S.loaded)"


def trace_js(plot_id: str, what: str = "x", trace: int = 0) -> str:
    """A JS function returning trace `trace`'s `what` (x, y) of a Plotly chart as an array, or null while the chart
    or that trace does not exist yet (a chart is created empty and filled when its history arrives)."""
    return (f"() => {{ const d = document.getElementById({plot_id!r}); "
            f"const t = d && d.data && d.data[{trace}]; return t ? Array.from(t.{what}) : null; }}")


def wait_trace(page, plot_id: str, condition: str, trace: int = 0, timeout: float = 30_000) -> None:
    """Until `condition` (a JS expression over `x`, the trace's steps) holds for a chart's trace."""
    steps = trace_js(plot_id, "x", trace)
    page.wait_for_function(f"() => {{ const x = ({steps})(); return x !== null && ({condition}); }}", timeout=timeout)


def sign_up(page, base: str, username: str, email: str, display_name: str, password: str) -> None:
    """Fill and send the sign-up form at `base` as a visitor does, until the page asks to check the mail."""
    page.goto(f"{base}/accounts/signup/")
    page.fill("#id_username", username)
    page.fill("#id_email", email)
    page.fill("#id_display_name", display_name)
    page.fill("#id_password1", password)
    page.fill("#id_password2", password)
    page.click("button[type=submit]")
    page.wait_for_selector("text=Check your email")
