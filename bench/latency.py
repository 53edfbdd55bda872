"""Publish → browser latency through the real chain. Prints one JSON object.

    .venv/bin/python bench/latency.py [--seconds 30] [--rate 5] [--width full|2] [--server uvicorn|daphne]
    .venv/bin/python bench/latency.py --tier nchan --others 1000     # through the push tier, 1,000 others watching

What it measures and how: docs/PERFORMANCE.md, `latency` (bench/results/latency.md).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import urllib.request

from harness import PushTap, Stack, add_save_flag, demo_names, free_port, pct, report, wait_for, wait_http
from viewer_client import CViewers, NchanViewer, pairs, run_stored, wpct

from observatory import contract
from observatory.streams import Publisher

HOOK = """
window.__obsFrames = [];
const _WS = window.WebSocket;
window.WebSocket = function(url, protocols) {
  const ws = protocols ? new _WS(url, protocols) : new _WS(url);
  ws.addEventListener('open', () => { window.__obsOpen = (window.__obsOpen || 0) + 1; });
  ws.addEventListener('message', (ev) => {
    const now = Date.now();
    try {
      const text = String(ev.data);  // nchan (ws+meta.nchan): its headers, a blank line, then the frame
      const got = JSON.parse('{['.includes(text[0]) ? text : text.slice(text.indexOf('\\n\\n') + 2));
      for (const msg of Array.isArray(got) ? got : [got]) {  // a coalesced batch: several frames
        const s = msg.series && msg.series[%(loss)s];
        if (s) window.__obsFrames.push([now, msg.type, s.steps]);
      }
    } catch (e) {}
  });
  return ws;
};
window.WebSocket.prototype = _WS.prototype;
Object.assign(window.WebSocket, {CONNECTING: 0, OPEN: 1, CLOSING: 2, CLOSED: 3});
"""


SCRAPE_TOKEN = "latency-bench-scrape"  # /metrics answers operators and this token only
PATHS = {"hub": "publish -> Redis -> ingest -> live log -> web hub -> page",
         "nchan": "publish -> Redis -> ingest -> live log -> relay -> nchan -> page"}


def prometheus_means(url: str) -> dict[str, float]:
    """{histogram name: mean in ms} from a Prometheus exposition (its _sum / _count)."""
    try:
        req = urllib.request.Request(url, headers={"Authorization": f"Bearer {SCRAPE_TOKEN}"})
        text = urllib.request.urlopen(req, timeout=5).read().decode()
    except Exception:
        return {}
    sums: dict[str, dict[str, float]] = {"_sum": {}, "_count": {}}
    for line in text.splitlines():
        name = line.split("{")[0].split(" ")[0]
        for end, acc in sums.items():
            if not line.startswith("#") and name.endswith(end):
                acc[name[:-len(end)]] = acc.get(name[:-len(end)], 0.0) + float(line.rsplit(" ", 1)[1])
    return {k: round(1000 * v / sums["_count"][k], 1) for k, v in sums["_sum"].items() if sums["_count"].get(k)}


def measure_latency(seconds: float, rate: float, width: str = "full", server: str = "uvicorn", tier: str = "hub",
                    others: int = 0) -> dict:
    with Stack("latency") as stack:
        stack.site(private_redis=True, OBS_METRICS_TOKEN=SCRAPE_TOKEN)  # a concurrent bench flushes the shared db
        return measure(stack, seconds, rate, width, server, tier, others)


def measure(stack: Stack, seconds: float, rate: float, width: str, server: str, tier: str, others: int) -> dict:
    port = free_port()
    front, crowd, push_tap = port, None, None
    if tier == "nchan":  # the page through nginx + nchan as `make run` has it, the relay feeding it (--tier nchan)
        front, _ = stack.push_tier(port, conn_limit=others + 100)  # the crowd shares 127.0.0.1: limit lifted
    stack.web(server, port=port, wait=False)
    stack.ingest()
    names = demo_names() if width == "full" else [contract.M_LOSS, contract.M_LR]
    run_id = f"bench-{int(time.time())}"
    pub = Publisher(stack.redis_url, run_id)
    stack.callback(pub.close)
    sent: dict[int, float] = {}
    pub.publish("run", {"t": time.time(), "name": "latency bench", "config": {}})
    pub.metrics(0, {n: 1.0 for n in names})
    pub.flush()
    tap = PushTap(stack.redis_url, run_id)
    tap.start() or stack.callback(tap.stop.set)
    base = f"http://127.0.0.1:{front}"
    wait_http(f"{base}/api/runs/", 60)
    # a loaded box starts ingest slowly; without the run the page is a 404
    wait_for(lambda: run_stored(base, run_id, stepped=False), 120, f"ingest creating run {run_id}")
    if tier == "nchan":
        push_tap = NchanViewer(f"ws://127.0.0.1:{front}/live/runs/{run_id}/lite/")
        push_tap.start()
        stack.callback(lambda: push_tap.stop.set() or push_tap.join())
        if not push_tap.ready.wait(30):  # open before the first step is published
            raise RuntimeError(f"nchan refused {run_id}'s channel for 30 s: the relay never made it")
    if others:  # --others K: K viewers on the run's live path meanwhile (bench/viewers.c), connected first
        crowd = CViewers([f"ws://127.0.0.1:{front}/live/runs/{run_id}/lite/" if tier == "nchan" else
                          f"ws://127.0.0.1:{port}/ws/runs/{run_id}/"], others, rate=0, hub=tier == "hub",
                         resume={"type": "resume", "metrics": [contract.M_LOSS]})
        stack.callback(crowd.kill)
        crowd_ready = crowd.ready()
    page = stack.browser().new_page()
    page.add_init_script(HOOK % {"loss": json.dumps(contract.M_LOSS)})
    page.goto(f"{base}/runs/{run_id}/")
    # history loaded, socket open and subscribed: the resume's backfill frame names the series
    page.wait_for_function("() => window.__obsFrames !== undefined && (window.__obsFrames.length > 0"
                           + (" || window.__obsOpen > 0)" if tier == "nchan" else ")"), timeout=30_000)
    n = int(seconds * rate)
    t0 = time.monotonic()
    for step in range(1, n + 1):
        target = t0 + step / rate
        time.sleep(max(0.0, target - time.monotonic()))
        sent[step] = time.time() * 1000.0
        vals = {n: 1.0 / (1 + (step + i) % 97) for i, n in enumerate(names)}
        vals[contract.M_LOSS] = 5.0 / (1 + step / 100)
        pub.metrics(step, vals)
    try:  # the last step's arrival; a lost step is reported in steps_received, not waited for forever
        page.wait_for_function(f"() => window.__obsFrames.some((f) => f[2].includes({n}))", timeout=10_000)
    except Exception:
        pass
    frames = page.evaluate("() => window.__obsFrames")
    server_stats = prometheus_means(f"http://127.0.0.1:{port}/metrics")
    if crowd is not None:
        crowd.stop(0)
        crowd_out = crowd.result()
    arrived: dict[int, float] = {}
    for now, _typ, steps in frames:
        for s in steps:
            arrived.setdefault(s, now)
    lat = [arrived[s] - sent[s] for s in sent if s in arrived]
    tap.stop.set()
    out = {"tier": tier, "path": PATHS[tier], "others": others}
    if tier == "hub":  # publish -> ingest's push; the web server's /metrics histograms: push -> fan-out, publish -> it
        ing = [tap.pushed[s] * 1000.0 - sent[s] for s in sent if s in tap.pushed]
        out.update({"relay_mean_ms": server_stats.get("observatory_live_relay_delay_seconds"),
                    "publish_to_fanout_mean_ms": server_stats.get("observatory_live_push_delay_seconds"),
                    "ingest_p50_ms": round(pct(ing, 50), 1) if ing else None,
                    "ingest_p99_ms": round(pct(ing, 99), 1) if ing else None})
    else:  # publish -> relay -> nchan -> the bench's socket on the page's channel
        push = [push_tap.pushed[s] * 1000.0 - sent[s] for s in sent if s in push_tap.pushed]
        out.update({"push_steps_received": len(push), "push_p50_ms": round(pct(push, 50), 1) if push else None,
                    "push_p99_ms": round(pct(push, 99), 1) if push else None})
    if crowd is not None:  # the others' own delays, and (nchan) each step's first arrival at any of them:
        # publish -> relay -> nchan -> a socket, the push tier's share
        secs = {s: t / 1000.0 for s, t in sent.items()}
        ws = pairs(crowd_out, secs, set(secs))
        first = sorted((f - secs[s]) * 1000 for s, _n, f, _h in crowd_out["steps"] if s in secs)
        out.update({"others_connected": crowd_ready[0], "others_failed": crowd_ready[1],
                    "others_dropped": crowd_out["dropped"], "others_errors": crowd_out["errors"],
                    "others_p50_ms": round(wpct(ws, 50), 1) if ws else None,
                    "others_p99_ms": round(wpct(ws, 99), 1) if ws else None,
                    "first_socket_p50_ms": round(pct(first, 50), 1) if first else None,
                    "first_socket_p99_ms": round(pct(first, 99), 1) if first else None})
    return {**out, "steps_sent": len(sent), "steps_received": len(lat), "rate_per_s": rate, "width": len(names),
            "server": server,
            "p50_ms": round(pct(lat, 50), 1) if lat else None, "p99_ms": round(pct(lat, 99), 1) if lat else None,
            "mean_ms": round(statistics.fmean(lat), 1) if lat else None, "max_ms": round(max(lat), 1) if lat else None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--rate", type=float, default=5.0, help="steps per second (the demo trainer's rate)")
    ap.add_argument("--width", choices=("full", "2"), default="full", help="series per step: the demo's, or 2")
    ap.add_argument("--server", choices=("uvicorn", "daphne"), default="uvicorn")
    ap.add_argument("--tier", choices=("hub", "nchan"), default="hub",
                    help="nchan: the page through nginx + nchan and the relay, as `make run` starts them")
    ap.add_argument("--others", type=int, default=0,
                    help="K other viewers of the run meanwhile (bench/viewers.c; nchan's lite channel, or the hub's "
                         "socket with a one-series resume)")
    ap.add_argument("--json", action="store_true", help="print the JSON object on one line")
    add_save_flag(ap)
    args = ap.parse_args()
    print(f"measuring publish → browser latency for {args.seconds:.0f}s at {args.rate}/s ...", file=sys.stderr)
    out = {"publish_to_browser": measure_latency(args.seconds, args.rate, args.width, args.server,
                                                       args.tier, args.others),
           "targets": {"p50_ms": 50, "p99_ms": 250}}
    return report("latency" if args.tier == "hub" else "latency_nchan", out, args.json, not args.no_save)


if __name__ == "__main__":
    sys.exit(main())
