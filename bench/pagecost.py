"""What a page costs its main thread, read from Chromium itself (bench/dashboard.py, bench/liveview.py)."""

from __future__ import annotations

import json
from collections import defaultdict

LONG_TASKS_JS = """
window.__obsLong = [];
try {
  new PerformanceObserver((list) => {
    for (const e of list.getEntries()) window.__obsLong.push([e.startTime, e.duration]);
  }).observe({type: 'longtask', buffered: true});
} catch (e) {}
"""

# Before the first paint ("obs-first-paint"): JavaScript fetched and run (decoded bytes: <script> elements', every .js)
# and page times, ms (scripts_run: DOMContentLoaded, its charts built; "server.<part>": from Server-Timing). A script
# the answer's Link header preloaded is fetched by the preload (initiator "link"), run by its <script> element.
JS_BEFORE_PAINT = """() => {
  const srcs = new Set([...document.scripts].map((s) => s.src).filter(Boolean));
  const fp = performance.getEntriesByName('obs-first-paint')[0].startTime,
    run = (r) => r.initiatorType === 'script' || srcs.has(r.name);
  const js = performance.getEntriesByType('resource').filter((r) => new URL(r.name).pathname.endsWith('.js') &&
                                                               r.responseEnd <= fp), ran = js.filter(run);
  const sum = (l) => l.reduce((a, r) => a + (r.decodedBodySize || r.transferSize || 0), 0);
  const nav = performance.getEntriesByType('navigation')[0], phases = {first_byte: nav.responseStart, first_paint: fp,
    scripts_fetched: Math.max(...ran.map((r) => r.responseEnd)), scripts_run: nav.domContentLoadedEventStart};
  nav.serverTiming.forEach((t) => { phases['server.' + t.name] = t.duration; });
  return {run: sum(ran), fetched: sum(js), files: ran.map((r) => r.name.split('/').pop()), phases};
}"""


def ws_hook(on_message: str, on_open: str = "") -> str:
    """An init script: every WebSocket the page opens runs the JS `on_message` (with `ev`) on each message, and
    `on_open` when it opens."""
    return """(() => {
  const _WS = window.WebSocket;
  window.WebSocket = function (url, protocols) {
    const ws = protocols ? new _WS(url, protocols) : new _WS(url);
    ws.addEventListener('open', () => { %s });
    ws.addEventListener('message', (ev) => { %s });
    return ws;
  };
  window.WebSocket.prototype = _WS.prototype;
  Object.assign(window.WebSocket, {CONNECTING: 0, OPEN: 1, CLOSING: 2, CLOSED: 3});
})();
""" % (on_open, on_message)


class Cdp:
    """A page's CDP session: throttling, main-thread time."""

    def __init__(self, page, throttle: float = 1.0):
        self.s = page.context.new_cdp_session(page)
        self.s.send("Performance.enable")
        if throttle != 1:
            self.s.send("Emulation.setCPUThrottlingRate", {"rate": throttle})

    def main_thread_ms(self) -> float:
        """The renderer main thread's busy time so far (all tasks: script, style, layout, paint, GC)."""
        got = {m["name"]: m["value"] for m in self.s.send("Performance.getMetrics")["metrics"]}
        return got.get("TaskDuration", 0.0) * 1000


def trace_tasks(trace: bytes, mark_prefix: str = "obs-", pieces: list | None = None
                ) -> tuple[list[tuple[float, float, float]], list[tuple[float, str]], dict[str, float]]:
    """From a Chromium trace: the page's main-thread top-level tasks [(start ms, duration ms, its thread's CPU ms:
    less where the thread waited, for a core or for another thread)], its user-timing
    marks starting with `mark_prefix` [(ms, name)] (same clock) and the main thread's self time by event name;
    `pieces`, when given, gets every main-thread event's (start ms, name, self ms)."""
    events = json.loads(trace)
    events = events["traceEvents"] if isinstance(events, dict) else events
    mains = {(e["pid"], e["tid"]) for e in events
             if e.get("ph") == "M" and e.get("name") == "thread_name" and e["args"].get("name") == "CrRendererMain"}
    marks = [(e["ts"] / 1000, e["name"]) for e in events
             if e.get("name", "").startswith(mark_prefix) and "user_timing" in e.get("cat", "")]
    mark_threads = {(e["pid"], e["tid"]) for e in events if e.get("name", "").startswith(mark_prefix)}
    main = (mains & mark_threads) or mains  # the page's renderer (it made the marks)
    on_main = sorted((e for e in events if (e.get("pid"), e.get("tid")) in main and e.get("ph") == "X"
                      and "dur" in e), key=lambda e: (e["ts"], -e["dur"]))
    top = ("RunTask", "ThreadControllerImpl::RunTask")
    tasks = [(e["ts"] / 1000, e["dur"] / 1000, e.get("tdur", e["dur"]) / 1000) for e in on_main if e["name"] in top]
    selfs: dict[str, float] = defaultdict(float)
    stack: list[list] = []  # [end, name, children's time, duration, start]

    def done(end: float, name: str, children: float, dur: float, start: float) -> None:
        selfs[name] += (dur - children) / 1000
        if pieces is not None:
            pieces.append((start / 1000, name, (dur - children) / 1000))
    for e in on_main:
        while stack and stack[-1][0] <= e["ts"]:
            done(*stack.pop())
        if stack:
            stack[-1][2] += e["dur"]
        stack.append([e["ts"] + e["dur"], e["name"], 0, e["dur"], e["ts"]])
    for rest in stack:
        done(*rest)
    for name in top:  # task time no finer event names
        if name in selfs:
            selfs["(task, unattributed)"] = selfs.get("(task, unattributed)", 0.0) + selfs.pop(name)
    return tasks, sorted(marks), dict(sorted(selfs.items(), key=lambda kv: -kv[1])[:15])
