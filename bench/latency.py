"""Publish → browser latency, and the cost of publishing inside a training loop. Prints one JSON object.

    .venv/bin/python bench/latency.py [--seconds 30] [--rate 5]

Latency: the real chain — `observatory.streams.Publisher` (the trainer's) → Redis stream → `manage.py ingest`
(subprocess) → channel layer → daphne (subprocess) → a real Chromium page on the run's dashboard (Playwright).
The page's WebSocket frames are timestamped in the browser (Date.now(), same host clock as the publisher), and
each step's latency is (arrival of the step in the page) − (time `Publisher.metrics` was called for it).
Uses Redis db 14 and a throw-away SQLite file, so it never touches a developer's runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from observatory import contract  # noqa: E402
from observatory.streams import Publisher  # noqa: E402

HOOK = """
window.__obsFrames = [];
const _WS = window.WebSocket;
window.WebSocket = function(url, protocols) {
  const ws = protocols ? new _WS(url, protocols) : new _WS(url);
  ws.addEventListener('message', (ev) => {
    const now = Date.now();
    try {
      const msg = JSON.parse(ev.data);
      const s = msg.series && msg.series[%(loss)s];
      if (s) window.__obsFrames.push([now, msg.type, s.steps]);
    } catch (e) {}
  });
  return ws;
};
window.WebSocket.prototype = _WS.prototype;
Object.assign(window.WebSocket, {CONNECTING: 0, OPEN: 1, CLOSING: 2, CLOSED: 3});
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q / 100 * (len(xs) - 1))))]


def wait_http(url: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=1).read()
            return
        except Exception:
            time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer in {timeout}s")


def measure_latency(seconds: float, rate: float) -> dict:
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        return {"skipped": "no Debian chromium on PATH (apt-get install -y chromium)"}
    redis_url = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/14")
    import redis

    redis.Redis.from_url(redis_url).flushdb()
    tmp = tempfile.mkdtemp(prefix="obs-bench-")
    port = free_port()
    env = {**os.environ, "REDIS_URL": redis_url, "DATABASE_URL": f"sqlite:///{tmp}/bench.sqlite3",
           "OBS_DEBUG": "1", "OBS_DATA_DIR": tmp, "PYTHONUNBUFFERED": "1", "OBS_LOG_LEVEL": "WARNING"}
    py = sys.executable
    subprocess.run([py, "manage.py", "migrate", "--noinput"], cwd=ROOT, env=env, check=True,
                   stdout=subprocess.DEVNULL)
    procs = [subprocess.Popen([py, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "webapp.asgi:application"],
                              cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
             subprocess.Popen([py, "manage.py", "ingest"], cwd=ROOT, env=env, stderr=subprocess.DEVNULL)]
    run_id = f"bench-{int(time.time())}"
    pub = Publisher(redis_url, run_id)
    sent: dict[int, float] = {}
    try:
        pub.publish("run", {"t": time.time(), "name": "latency bench", "config": {}})
        pub.metrics(0, {contract.M_LOSS: 5.0})
        pub.flush()
        base = f"http://127.0.0.1:{port}"
        wait_http(f"{base}/api/runs/")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:  # ingest has created the run
            try:
                urllib.request.urlopen(f"{base}/api/runs/{run_id}/", timeout=1).read()
                break
            except Exception:
                time.sleep(0.2)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=[
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync"])
            page = browser.new_page()
            page.add_init_script(HOOK % {"loss": json.dumps(contract.M_LOSS)})
            page.goto(f"{base}/runs/{run_id}/")
            # history loaded, socket open and subscribed: the resume's backfill frame names the series
            page.wait_for_function("() => window.__obsFrames !== undefined && window.__obsFrames.length > 0",
                                   timeout=30_000)
            n = int(seconds * rate)
            t0 = time.monotonic()
            for step in range(1, n + 1):
                target = t0 + step / rate
                time.sleep(max(0.0, target - time.monotonic()))
                sent[step] = time.time() * 1000.0
                pub.metrics(step, {contract.M_LOSS: 5.0 / (1 + step / 100), contract.M_LR: 1e-3})
            try:  # the last step's arrival; a lost step is reported in steps_received, not waited for forever
                page.wait_for_function(f"() => window.__obsFrames.some((f) => f[2].includes({n}))", timeout=10_000)
            except Exception:
                pass
            frames = page.evaluate("() => window.__obsFrames")
            browser.close()
    finally:
        pub.close()
        for pr in procs:
            pr.send_signal(signal.SIGTERM)
        for pr in procs:
            try:
                pr.wait(10)
            except subprocess.TimeoutExpired:
                pr.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    arrived: dict[int, float] = {}
    for now, _typ, steps in frames:
        for s in steps:
            arrived.setdefault(s, now)
    lat = [arrived[s] - sent[s] for s in sent if s in arrived]
    return {"steps_sent": len(sent), "steps_received": len(lat), "rate_per_s": rate,
            "p50_ms": round(pct(lat, 50), 1) if lat else None, "p99_ms": round(pct(lat, 99), 1) if lat else None,
            "mean_ms": round(statistics.fmean(lat), 1) if lat else None, "max_ms": round(max(lat), 1) if lat else None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--rate", type=float, default=5.0, help="steps per second (the demo trainer's rate)")
    args = ap.parse_args()
    print(f"measuring publish → browser latency for {args.seconds:.0f}s at {args.rate}/s ...", file=sys.stderr)
    out = {"publish_to_browser": measure_latency(args.seconds, args.rate),
           "targets": {"p50_ms": 100, "p99_ms": 500}}
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
