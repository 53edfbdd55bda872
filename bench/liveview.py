"""What a live view costs the page: main-thread time per live update and long tasks, at the demo's full width."""

from __future__ import annotations

import bisect
import json
import os
import statistics
import sys
import time
import urllib.parse
from collections import defaultdict
from contextlib import nullcontext
from pathlib import Path

from harness import (Stack, compared, demo_names, heartbeat, liveview_values as values, parser, pct, report,
                     wait_for, wait_http)
from pagecost import LONG_TASKS_JS, Cdp, trace_tasks, ws_hook
from stack import tree
from viewer_client import run_stored

from observatory.streams import Publisher

MARK_JS = "window.__obsFrames = 0;\n" + ws_hook("window.__obsFrames++; performance.mark('obs-live-frame');")
# The page's DOM writes by kind and element ("characterData #stat-step", "attributes div.toast@class"), counted from
# the window's start (reset there): what each live update asks style, layout and paint to look at again.
MUTATIONS_JS = """window.__obsMut = {};
new MutationObserver((records) => { for (const r of records) {
  const el = r.target.nodeType === 1 ? r.target : r.target.parentNode;
  const cls = el && typeof el.className === "string" && el.className ? "." + el.className.split(" ")[0] : "";
  const k = r.type + " " + (!el ? "?" : el.id ? "#" + el.id : el.nodeName.toLowerCase() + cls) +
    (r.attributeName ? "@" + r.attributeName : "");
  window.__obsMut[k] = (window.__obsMut[k] || 0) + 1;
} }).observe(document, {subtree: true, childList: true, attributes: true, characterData: true});
"""
RENDER_STEPS = ("UpdateLayoutTree", "Layout", "PrePaint", "Paint", "Layerize")  # the renderer's steps a DOM write costs
TRACE_CATEGORIES = ["toplevel", "blink.user_timing", "devtools.timeline", "disabled-by-default-v8.gc"]


def update_of(t: float, bounds: list[float]) -> int | None:
    """The update `t` (ms) falls in: bounds are each live message's time, then the window's end; None: outside."""
    j = bisect.bisect_right(bounds, t) - 1
    return j if 0 <= j < len(bounds) - 1 else None


def per_update(tasks: list[tuple[float, float, float]], marks: list[float], end: float, cpu: bool = False
               ) -> list[float]:
    """Main-thread ms from each live message to the next (the last: to `end`), tasks by their start; with `cpu`,
    the thread's CPU ms instead of its tasks' wall time."""
    bounds, out = marks + [end], [0.0] * len(marks)
    for start, dur, cpu_ms in sorted(tasks):
        if (j := update_of(start, bounds)) is not None:
            out[j] += cpu_ms if cpu else dur
    return out


def render_steps(pieces: list[tuple[float, str, float]], marks: list[float], end: float) -> dict:
    """RENDER_STEPS in the window: how many of each an update (mean) and their self ms an update."""
    bounds, out = marks + [end], {}
    for t, name, ms in pieces:
        if name in RENDER_STEPS and update_of(t, bounds) is not None:
            n, total = out.get(name, (0, 0.0))
            out[name] = (n + 1, total + ms)
    upd = max(1, len(marks))
    return {k: {"per_update": round(n / upd, 2), "ms_per_update": round(ms / upd, 3)} for k, (n, ms) in out.items()}


def worst_updates(pieces: list[tuple[float, str, float]], marks: list[float], end: float, upd: list[float],
                  n: int = 6) -> list[dict]:
    """The `n` costliest updates, each with where its main-thread time went (self ms by trace event name, top 5;
    task time no finer event names is "(task)", as in trace_self_ms)."""
    bounds, by = marks + [end], [{} for _ in upd]
    for t, name, ms in pieces:
        if (j := update_of(t, bounds)) is not None:
            name = "(task)" if name in ("RunTask", "ThreadControllerImpl::RunTask") else name
            by[j][name] = by[j].get(name, 0.0) + ms
    out = []
    for i in sorted(range(len(upd)), key=lambda i: -upd[i])[:n]:
        top = sorted(by[i].items(), key=lambda kv: -kv[1])[:5]
        out.append({"ms": round(upd[i], 1), "at_s": round((marks[i] - marks[0]) / 1000, 1),
                    "where_ms": {k: round(v, 1) for k, v in top}})
    return out


def gc_summary(trace: bytes, marks: list[float]) -> dict:
    """V8's collections in the live window (its GC trace, `V8.GCTraceGCNVP`): how many major ('mc') and minor ones,
    the major ones' pauses, why they started, and how fast the heap grew between collections (KB/s): V8's and Blink's
    together (the 'global' size Chromium's unified heap paces major GCs by) and V8's old space alone."""
    events = json.loads(trace)
    events = events["traceEvents"] if isinstance(events, dict) else events
    gcs = sorted(((e["ts"] / 1000, json.loads(e["args"]["value"])) for e in events
                  if e.get("name") == "V8.GCTraceGCNVP" and "value" in e.get("args", {})), key=lambda g: g[0])
    gcs = [(t, g) for t, g in gcs if marks and marks[0] <= t <= marks[-1]]
    major = [(t, g) for t, g in gcs if g.get("gc") == "mc"]
    grown = {"global": 0.0, "old": 0.0}
    for (_, a), (_, b) in zip(gcs, gcs[1:]):
        grown["global"] += max(0, b["start_global_consumed_size"] - a["end_global_consumed_size"])
        grown["old"] += max(0, b["start_old_gen_consumed_size"] - a["end_old_gen_consumed_size"])
    span = (gcs[-1][0] - gcs[0][0]) / 1000 if len(gcs) > 1 else 0.0
    return {"major": len(major), "minor": len(gcs) - len(major),
            "major_pause_ms": [round(g.get("pause", 0.0), 1) for _, g in major],
            "major_reasons": sorted({g.get("reason", "") + (" (reduce memory)" if g.get("reduce_memory") else "")
                                     for _, g in major}),
            "heap_growth_kb_per_s": {k: round(v / 1024 / span, 1) for k, v in grown.items()} if span else None}


def allocated(head: dict, updates: int) -> dict:
    """The window's JavaScript allocations (V8's sampling heap profile, collected objects included): KB an update, and
    the five functions that allocated most (a builtin's, "join < f", with the page's function that called it)."""
    by: dict[str, float] = defaultdict(float)
    todo = [(head, "")]
    while todo:
        node, caller = todo.pop()
        f = node["callFrame"]
        here = f"{f['functionName'] or '(anonymous)'} {f['url'].rsplit('/', 1)[-1]}:{f['lineNumber'] + 1}"
        here += "" if f["functionName"] else f":{f['columnNumber'] + 1}"  # (a bundle's line holds many)
        by[here if f["url"] or not caller else f"{f['functionName']} < {caller}"] += node["selfSize"]
        todo += [(c, here if f["url"] else caller) for c in node.get("children", [])]
    top, kb = sorted(by.items(), key=lambda kv: -kv[1])[:5], 1024 * max(1, updates)
    return {"kb_per_update": round(sum(by.values()) / kb, 2),
            "top_kb_per_update": {k: round(v / kb, 2) for k, v in top}}


def chart_url(base: str, run_id: str, page, charts: int) -> str:
    """The dashboard with `charts` charts: the defaults, then more of the run's series (the URL holds the view)."""
    if not charts:
        return f"{base}/runs/{run_id}/"
    data = page.evaluate("() => JSON.parse(document.getElementById('page-data').textContent)")
    ids = [c.get("id") or c["metrics"][0] for c in data["charts"]]
    taken = {m for c in data["charts"] for m in c["metrics"] + c.get("optional", [])}
    ids += [n for n in demo_names() if n not in taken and n not in ids][:max(0, charts - len(ids))]
    return f"{base}/runs/{run_id}/?" + urllib.parse.urlencode([("chart", i) for i in ids[:charts]])


def measure(a, other: Path | None = None) -> dict:
    """The live window (the command line's `a`) on this tree's page; with `other` (a tree), the same run's next window
    on that tree's page (its own web server, same database and Redis) right after: {"this": ..., "other": ...}."""
    stack = Stack("liveview").site()
    port, redis_url = stack.web(wait=False).port, stack.redis_url
    ports = {"this": port}
    if other is not None:
        env, stack.env = stack.env, {**stack.env, "PYTHONPATH": str(other)}  # (its own code and static files)
        ports["other"] = stack.web(cwd=other, wait=False).port
        stack.env = env
    stack.ingest()
    names, run_id = demo_names(), f"liveview-{int(time.time())}"
    pub = Publisher(redis_url, run_id)
    base = f"http://127.0.0.1:{port}"
    try:
        pub.publish("run", {"t": time.time(), "name": "live view bench", "config": {}})
        pub.publish("state", {"t": time.time(), "state": "training", "step": 0, "detail": ""})
        for step in range(a.history):
            pub.metrics(step, values(step, names, a.data))
        heartbeat(pub, a.history - 1, a.rate)
        pub.flush()
        wait_http(f"{base}/api/runs/")
        wait_for(lambda: run_stored(base, run_id, a.history - 1), 600, "ingest to store the run's history", 0.5)
        browser = stack.browser(a.gpu)
        windows, step0 = {}, a.history
        for name, at in ports.items():
            wait_http(f"http://127.0.0.1:{at}/api/runs/")
            windows[name] = live_window(browser, f"http://127.0.0.1:{at}", run_id, pub, names, step0, a)
            step0 += int(a.seconds * a.rate)
    finally:
        pub.close()
        stack.close()
    out = {name: summarise(a, **w) for name, w in windows.items()}
    return out if other is not None else out["this"]


def live_window(browser, base: str, run_id: str, pub, names: list[str], step0: int, a) -> dict:
    """One live window on the dashboard at `base`: the run's steps from step0 on, published at --rate."""
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    errors: list[str] = []
    page.add_init_script(LONG_TASKS_JS + MARK_JS + MUTATIONS_JS)
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{base}/runs/{run_id}/")
    url = chart_url(base, run_id, page, a.charts)
    if a.charts:
        page.goto(url)
    cdp = Cdp(page, a.cpu_throttle)
    page.wait_for_function("() => document.getElementById('stat-conn').textContent === 'live' && "
                           "window.__obsFrames > 0", timeout=60_000)
    # the live window starts on the settled page, every chart drawn and complete (first paint: bench/dashboard.py's)
    page.wait_for_function("() => performance.getEntriesByName('obs-charts-drawn').length > 0", timeout=60_000)
    if a.page_js:  # (to find what a part of the page costs: hide it, or stub it out)
        page.evaluate(a.page_js)
    open_charts = page.evaluate("() => document.querySelectorAll('#charts figure.chart').length")
    page.evaluate("() => { window.__obsMut = {}; }")
    # V8's sampled allocations in the window (every object kept or collected: bytes allocated, by function)
    cdp.s.send("HeapProfiler.enable")
    cdp.s.send("HeapProfiler.startSampling", {"samplingInterval": 1024, "includeObjectsCollectedByMajorGC": True,
                                              "includeObjectsCollectedByMinorGC": True})
    browser.start_tracing(page=page, categories=TRACE_CATEGORIES)
    t_page = page.evaluate("() => performance.now()")
    frames0, main0 = page.evaluate("() => window.__obsFrames"), cdp.main_thread_ms()
    t0 = time.monotonic()
    n = int(a.seconds * a.rate)
    for k in range(1, n + 1):
        time.sleep(max(0.0, t0 + k / a.rate - time.monotonic()))
        pub.metrics(step0 + k - 1, values(step0 + k - 1, names, a.data))
        if k % max(1, round(2 * a.rate)) == 0:  # a heartbeat every 2 s, as the trainer's (train.py)
            heartbeat(pub, step0 + k - 1, a.rate)
    page.evaluate("() => performance.mark('obs-bench-end')")  # the window's end: the bench's probes follow
    allocs = cdp.s.send("HeapProfiler.stopSampling")["profile"]["head"]
    page.wait_for_function(f"() => window.__obsFrames > {frames0} && (Array.from(document.getElementById("
                           f"'chart-train-loss').data[0].x).pop() >= {step0 + n - 1})", timeout=30_000)
    wall = time.monotonic() - t0
    main = cdp.main_thread_ms() - main0
    every_long = page.evaluate("() => window.__obsLong")
    long_tasks = [d for t, d in every_long if t >= t_page]
    settle_long = [d for t, d in every_long if t < t_page]
    frames = page.evaluate("() => window.__obsFrames") - frames0
    redraws = page.evaluate("() => window.Obs && Obs.redrawCounts")
    mutations = page.evaluate("() => window.__obsMut")
    trace = browser.stop_tracing()
    pieces: list = []
    tasks, marks, selfs = trace_tasks(trace, "obs-", pieces)
    page.close()
    return {"wall": wall, "main": main, "long_tasks": long_tasks, "settle_long": settle_long, "frames": frames,
            "redraws": redraws, "mutations": mutations, "trace": trace, "tasks": tasks, "marks": marks,
            "selfs": selfs, "pieces": pieces, "errors": errors, "open_charts": open_charts, "n": n, "allocs": allocs}


def summarise(a, *, wall: float, main: float, long_tasks: list, settle_long: list, frames: int, redraws, mutations,
              trace: bytes, tasks: list, marks: list, selfs: dict, pieces: list, errors: list, open_charts: int,
              n: int, allocs: dict) -> dict:
    """A live window (live_window's, as keywords): main-thread time per update (p50, p99), long tasks, redraws."""
    # an update: from one live message to the next, up to the window's end (the bench's own probes of the page
    # follow it, and the task that marked it is the bench's: not counted)
    end = next((t for t, name in marks if name == "obs-bench-end"), None)
    stamps = [t for t, name in marks if name == "obs-live-frame" and (end is None or t < end)]
    if end is None:  # (not marked: the last message has no next)
        stamps, end = stamps[:-1], (stamps[-1] if stamps else 0.0)
    tasks = [(t, d, c) for t, d, c in tasks if not t <= end <= t + d]
    upd, upd_cpu = per_update(tasks, stamps, end), per_update(tasks, stamps, end, cpu=True)
    r = lambda x: round(x, 2)  # noqa: E731
    return {"seconds": round(wall, 1), "rate_per_s": a.rate, "width": len(demo_names()), "history_steps": a.history,
            "charts_open": open_charts, "cpu_throttle": a.cpu_throttle, "data": a.data, "updates": len(upd),
            "frames_counted": frames,
            "update_main_ms": {"p50": r(pct(upd, 50)), "p99": r(pct(upd, 99)), "max": r(max(upd)),
                               "mean": r(statistics.fmean(upd))} if upd else None,
            "update_main_cpu_ms": {"p50": r(pct(upd_cpu, 50)), "p99": r(pct(upd_cpu, 99)), "max": r(max(upd_cpu))}
            if upd_cpu else None,
            "main_ms_per_step": r(sum(upd) / n) if upd else None,
            "long_tasks_per_min": r(len(long_tasks) * 60 / wall), "long_tasks_ms": [round(d) for d in long_tasks],
            "settle_long_tasks_ms": [round(d) for d in settle_long],
            "main_thread_busy": r(main / (wall * 1000)),
            "trace_self_ms": {k: round(v, 1) for k, v in selfs.items()},
            "worst_updates": worst_updates(pieces, stamps, end, upd) if upd else [],
            "gc": gc_summary(trace, stamps),
            "render_steps": render_steps(pieces, stamps, end),
            "allocated": allocated(allocs, len(upd)),
            "dom_mutations_per_update": round(sum(mutations.values()) / max(1, len(upd)), 2),
            "dom_mutations": dict(sorted(mutations.items(), key=lambda kv: -kv[1])[:12]),
            "redraws_since_load": redraws, "console_errors": errors, "load_average": round(os.getloadavg()[0], 2)}


def main() -> int:
    ap = parser(__doc__, "liveview", page=True)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--rate", type=float, default=5.0, help="steps per second (the demo trainer's rate)")
    ap.add_argument("--history", type=int, default=2000, help="steps the run has before the page opens")
    ap.add_argument("--charts", type=int, default=0, help="charts open (0: the default charts)")
    ap.add_argument("--data", choices=("sawtooth", "smooth"), default="sawtooth",
                    help="the synthetic series (bench/telemetry.py): sawtooth, marks changing almost "
                         "every step; smooth")
    ap.add_argument("--page-js", metavar="JS", default="",
                    help="run JS in the settled page before the window (hide or stub out a part to see what it costs)")
    args = ap.parse_args()
    if args.seconds <= 0 or args.rate <= 0 or args.history < 1 or args.charts < 0:
        ap.error("--seconds and --rate must be positive, --history at least 1, --charts at least 0")
    if not args.json:
        print(f"live view: {args.seconds:.0f}s at {args.rate}/s ...", file=sys.stderr)
    with tree(args.compare) if args.compare else nullcontext() as other:
        out = measure(args, other)
    if args.compare:  # this tree's window and the other's, on the same run one after the other (its page follows)
        out = {**compared(out["this"], out["other"], args.compare,
                          "update_main_ms.p50 update_main_ms.p99 dom_mutations_per_update allocated.kb_per_update"),
               "load_average": round(os.getloadavg()[0], 2)}
    out.update(gpu=args.gpu, targets={"update_main_p99_ms": 2 if not args.charts else 4, "long_tasks_per_min": 0})
    return report("liveview", out, args.json, not args.no_save)


if __name__ == "__main__":
    sys.exit(main())
