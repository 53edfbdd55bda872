"""Page speed with a long history, in a real Chromium: the dashboard's first paint and zoom refetch, or (--front) the
front page's first paint, the landed commit's against this checkout's. Prints one JSON object."""

from __future__ import annotations

import math
import os
import random
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from contextlib import ExitStack

import psutil

from harness import ROOT, Stack, compared, django_here, med, parser, proc_cpu_s, report, web_server
from stack import load_series, tree as checkout

ZOOMS = (200_000, 20_000, 2_000, 200, 20)  # window widths, in steps
# The data: a long synthetic run of seven series (noisy decays, a warm-up and cosine learning rate, a one-step loss
# spike) and, for --front, a featured run with an anomaly and an annotation beside many other runs.
RUN_ID, FRONT_ID = "bench-dashboard", "bench-front"
SERIES = ("train/loss", "train/cross_entropy_loss", "optim/learning_rate", "grad/norm/total",
          "throughput/tokens_per_second", "moe/drop_fraction", "throughput/total_tokens")
SPIKE_OFFSET = 123_457  # a one-step loss spike at this step (if the run is long enough)


def value(name: str, step: int, rnd: random.Random) -> float:
    if name == "throughput/total_tokens":
        return float((step + 1) * 4096)
    if name == "optim/learning_rate":
        return 3e-4 * min(1.0, step / 2000) * (0.1 + 0.9 * (1 + math.cos(math.pi * step / 1e6)) / 2)
    decay = 3.0 / math.sqrt(1 + step / 500)
    base = {"train/loss": 2.0 + decay, "train/cross_entropy_loss": 1.9 + decay, "grad/norm/total": 0.6,
            "throughput/tokens_per_second": 5.2e4, "moe/drop_fraction": 0.02}[name]
    return base * (1 + 0.05 * rnd.gauss(0, 1))


def seed(steps: int) -> bool:
    """The run with `steps` points per series, loaded once (False: it was there)."""
    from webapp.metrics.models import Series
    from webapp.runs.models import Run

    if Series.objects.filter(run_id=RUN_ID, count=steps).count() == len(SERIES):
        return False
    Run.objects.filter(pk=RUN_ID).delete()
    run = Run.objects.create(id=RUN_ID, name="dashboard benchmark", state="training", health="ended",
                             last_step=steps - 1, heartbeat={"tokens": steps * 4096, "token_budget": 2 * steps * 4096,
                                                            "steps_per_s": 4.0, "eta_s": steps / 4.0})
    spike = SPIKE_OFFSET % steps
    for name in SERIES:
        rnd = random.Random(name)
        load_series(run, name, ((step, v * 40 if name == "train/loss" and step == spike else v)
                                for step in range(steps) for v in (value(name, step, rnd),)))
    return True


def seed_front(steps: int, runs: int) -> None:
    """--front: the featured run (its loss, an anomaly, an annotation) and `runs` more, loaded once."""
    from webapp.anomalies.models import Anomaly
    from webapp.annotations.models import Annotation
    from webapp.metrics.models import Series
    from webapp.runs.models import Run

    if Series.objects.filter(run_id=FRONT_ID, name="train/loss", count=steps).exists():
        return
    Run.objects.filter(pk__startswith=FRONT_ID).delete()
    hb = {"tokens": steps * 4096, "token_budget": 2 * steps * 4096, "eta_s": 3600.0, "steps_per_s": 4.0}
    run = Run.objects.create(id=FRONT_ID, name="front-page benchmark", state="training", health="alive",
                             last_step=steps - 1, heartbeat=hb)
    load_series(run, "train/loss", ((i, 2.0 + 3.0 / math.sqrt(1 + i / 500)) for i in range(steps)))
    Anomaly.objects.create(run=run, key="loss_spike train/loss 77", kind="loss_spike", metric="train/loss",
                           start_step=77, peak_step=77, detected_step=77, severity="warning", score=3.0,
                           explanation="loss 9 at step 77 is 3x its running level")
    Annotation.objects.create(run=run, title="spike at 77", body="a bad batch?", body_html="<p>a bad batch?</p>",
                              step_start=70, step_end=80)
    for i in range(runs):
        Run.objects.create(id=f"{FRONT_ID}-{i:03d}", name=f"other {i}", state="stopped", health="ended",
                           last_step=1000 + i)


def front_paint(url: str, repeat: int, gpu: bool = False) -> dict:
    """--front: the front page's first contentful paint and its content in place (the featured chart, moments)."""
    fcp, ready, errors = [], [], []
    ready_js = ("() => !!document.querySelector('#front-chart .main-svg, #front-chart .uplot') && "
                "document.querySelectorAll('#moments li.moment').length >= 2")
    with Stack("frontpage-browser") as browsers:
        browser = browsers.browser(gpu)
        for _ in range(repeat):
            ctx = browser.new_context(viewport={"width": 1440, "height": 900})
            page = ctx.new_page()
            page.on("console", lambda m: m.type == "error" and errors.append(m.text))
            page.goto(url)
            page.wait_for_function(ready_js, timeout=60_000)
            ready.append(page.evaluate("() => performance.now()"))
            page.wait_for_function("() => performance.getEntriesByName('first-contentful-paint').length > 0")
            fcp.append(page.evaluate("() => performance.getEntriesByName('first-contentful-paint')[0].startTime"))
            ctx.close()
    return {"fcp_ms": med(fcp), "ready_ms": med(ready), "console_errors": errors[:5]}


def front(args, env: dict) -> int:
    """--front: the landed commit's `/` (--compare, default: the merge base with main) against this checkout's,
    both served in the same run from the same database."""
    base = args.compare or subprocess.check_output(["git", "merge-base", "HEAD", "main"], cwd=ROOT, text=True).strip()
    steps = args.steps or 200_000
    seed_front(steps, args.runs)
    out = {"base": base[:12], "steps": steps, "runs": args.runs + 1, "repeat": args.repeat, "gpu": args.gpu}
    with checkout(base) as landed:
        for name, tree in (("landed", landed), ("front", ROOT)):
            with web_server({**env, "PYTHONPATH": str(tree)}, cwd=tree) as server:
                out[name] = front_paint(f"http://127.0.0.1:{server.port}/", args.repeat, args.gpu)
    out["fcp_ratio_front_over_landed"] = round(out["front"]["fcp_ms"] / out["landed"]["fcp_ms"], 2)
    out["ready_ratio_front_over_landed"] = round(out["front"]["ready_ms"] / out["landed"]["ready_ms"], 2)
    out["load1"] = round(os.getloadavg()[0], 2)
    return report("frontpage", out, args.json, not args.no_save)


def renderers_cpu_ms() -> float:
    """CPU so far of this script's Chromium renderers, not counting each window's UI ("--top-chrome-webui")."""
    def renderer(p):
        try:
            return "--type=renderer" in (cmd := p.cmdline()) and "--top-chrome-webui" not in cmd
        except psutil.Error:
            return False
    return sum(proc_cpu_s(p.pid) * 1000 for p in psutil.Process().children(recursive=True) if renderer(p))


def long_tasks(page, since: float = 0.0, until: float = math.inf) -> list[float]:
    """Durations (ms) of the page's long tasks that started after `since` and before `until` (page time, ms)."""
    return [d for t, d in page.evaluate("() => window.__obsLong || []") if since <= t < until]


def measure(targets: dict, repeat: int, throttle: float = 1.0, gpu: bool = False) -> dict:
    """Wall times from the page's marks; the CPU spent on them (the page's renderer process and the web
    server, from /proc), which a busy machine inflates far less than wall time; the page's main-thread time and
    long tasks. targets: {name: (url, server pid)}; with several, the repetitions alternate between them (one
    browser, the same minutes), each measured on its own."""
    from pagecost import JS_BEFORE_PAINT, LONG_TASKS_JS, Cdp

    acc = {name: defaultdict(list, zooms={w: [] for w in ZOOMS}, gesture_charts={}) for name in targets}
    with Stack("dashboard-browser") as browsers:
        browser = browsers.browser(gpu)
        for i in range(repeat):
            for name, (url, server_pid) in targets.items():
                A = acc[name]
                context = browser.new_context(viewport={"width": 1400, "height": 900})
                page = context.new_page()
                page.add_init_script(LONG_TASKS_JS)
                cdp = Cdp(page, throttle)
                page.on("console", lambda m, A=A: m.type == "error" and A["errors"].append(m.text))
                page.on("pageerror", lambda e, A=A: A["errors"].append(str(e)))
                srv0, ren0 = proc_cpu_s(server_pid) * 1000, renderers_cpu_ms()
                page.goto(url)
                page.wait_for_function("() => performance.getEntriesByName('obs-first-paint').length > 0",
                                       timeout=60_000)
                A["first"].append(page.evaluate("() => performance.getEntriesByName('obs-first-paint')[0].startTime"))
                A["first_cpu"].append((renderers_cpu_ms() - ren0, proc_cpu_s(server_pid) * 1000 - srv0))
                A["first_main"].append(cdp.main_thread_ms())
                A["first_long"].append(long_tasks(page, until=A["first"][-1]))
                js = page.evaluate(JS_BEFORE_PAINT)
                A["js"].append(js)
                # the charts in view complete (hover, zoom, tools): "obs-charts-drawn" (plotly_drawn_ms, the name it
                # had when a light renderer painted first and Plotly took over)
                drawn = "performance.getEntriesByName('obs-charts-drawn')[0]"
                page.wait_for_function(f"() => !!(document.getElementById('chart-train-loss') || {{}}).data && "
                                       f"!!({drawn})", timeout=60_000)
                A["plotly"].append(page.evaluate(f"() => ({drawn}).startTime"))
                last = page.evaluate("() => Math.max(...document.getElementById('chart-train-loss').data[0].x)")
                for w in ZOOMS:
                    a = random.Random(i * 100 + w).randrange(0, max(1, last - w))
                    b0, s0, m0 = renderers_cpu_ms(), proc_cpu_s(server_pid) * 1000, cdp.main_thread_ms()
                    # the gesture: its time (page clock) taken just before the view zooms, as a drag ends
                    t0 = page.evaluate(f"""() => {{ const t = performance.now();
                        Obs.zoomTo({a}, {a + w}); return t; }}""")
                    page.wait_for_function("() => !!window.__obsZoom", timeout=30_000)
                    z = page.evaluate("""() => ({...window.__obsZoom,
                        start: performance.getEntriesByName('obs-zoom-start').pop().startTime,
                        done: performance.getEntriesByName('obs-zoom-done').pop().startTime})""")
                    own = z["charts"].get("train/loss", z["ms"])  # the loss chart's own (zoomTo names no source)
                    A["gesture"].append(z["done"] - t0)
                    A["gesture_own"].append(z["start"] + own - t0)
                    for cid, at in z["charts"].items():
                        A["gesture_charts"].setdefault(cid, []).append(z["start"] + at - t0)
                    A["zoom_cpu"].append((renderers_cpu_ms() - b0, proc_cpu_s(server_pid) * 1000 - s0))
                    A["zoom_main"].append(cdp.main_thread_ms() - m0)
                    A["zoom_long"].append(long_tasks(page, t0))
                    A["zooms"][w].append(z["ms"])
                    A["own"].append(own)
                context.close()
    def cpu(pairs):  # (browser, server) CPU ms of each
        return {"cpu_median": med([a + b for a, b in pairs]), "cpu_browser_median": med([a for a, _ in pairs]),
                "cpu_server_median": med([b for _, b in pairs])}

    out = {}
    for name, A in acc.items():
        first_long, all_zooms = A["first_long"], [x for xs in A["zooms"].values() for x in xs]
        out[name] = {
            "first_paint_ms": {"median": med(A["first"]), "runs": [round(x, 1) for x in A["first"]],
                               **cpu(A["first_cpu"]), "main_thread_median": med(A["first_main"]),
                               "long_tasks_median": med([len(x) for x in first_long]),
                               "long_task_ms_median": med([sum(x) for x in first_long]),
                               "longest_task_ms_median": med([max(x, default=0) for x in first_long])},
            "plotly_drawn_ms": {"median": med(A["plotly"]), "runs": [round(x, 1) for x in A["plotly"]]},
            "first_paint_phases_ms": {k: med([j["phases"][k] for j in A["js"]]) for k in A["js"][0]["phases"]},
            "js_before_first_paint_bytes": {"run_median": statistics.median([j["run"] for j in A["js"]]),
                                            "fetched_median": statistics.median([j["fetched"] for j in A["js"]]),
                                            "scripts_run": A["js"][-1]["files"]},
            "zoom_gesture_ms": {"every_chart_median": med(A["gesture"]), "zoomed_chart_median": med(A["gesture_own"]),
                                "by_chart_median": {k: med(v) for k, v in sorted(A["gesture_charts"].items())},
                                "runs": [round(x, 1) for x in A["gesture"]]},
            "zoom_ms": {"median": med(all_zooms), "zoomed_chart_median": med(A["own"]), **cpu(A["zoom_cpu"]),
                        "main_thread_median": med(A["zoom_main"]),
                        "long_tasks_total": sum(len(x) for x in A["zoom_long"]),
                        "by_window_steps": {str(w): med(xs) for w, xs in A["zooms"].items()}},
            "console_errors": A["errors"]}
    return out


def main() -> int:
    ap = parser(__doc__, "dashboard", "frontpage", db="dashboard", page=True)
    ap.add_argument("--steps", type=int, help="points per series (default 1,000,000; --front: 200,000)")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--front", action="store_true", help="the front page instead, landed against this checkout")
    ap.add_argument("--runs", type=int, default=20, help="--front: runs besides the featured one")
    args = ap.parse_args()
    env = django_here(args.db)
    if args.front:
        return front(args, env)
    args.steps = args.steps or 1_000_000
    t0 = time.perf_counter()
    seed_s = round(time.perf_counter() - t0, 1) if seed(args.steps) else None  # None: the run was loaded already
    trees = {"this": ROOT}
    targets = {}
    with ExitStack() as stack:  # each checkout served by its own code and static files, same database
        if args.compare:
            trees["other"] = stack.enter_context(checkout(args.compare))
        for name, tree in trees.items():
            server = stack.enter_context(web_server({**env, "PYTHONPATH": str(tree)}, cwd=tree))
            targets[name] = (f"http://127.0.0.1:{server.port}/runs/{RUN_ID}/", server.pid)
        out = measure(targets, args.repeat, args.cpu_throttle, args.gpu)
    result = {"steps_per_series": args.steps, "series": len(SERIES),
              "database": "postgresql" if "postgres" in env["DATABASE_URL"] else "sqlite",
              "seed_s": seed_s, "cpu_throttle": args.cpu_throttle,
              "gpu": args.gpu}
    if args.compare:  # this tree against the other, alternating repetitions: medians and ratios (this / other)
        result.update(compared({"tree": str(ROOT), **out["this"]}, out["other"], args.compare, (
            "first_paint_ms.median first_paint_ms.cpu_browser_median first_paint_ms.main_thread_median "
            "plotly_drawn_ms.median js_before_first_paint_bytes.run_median zoom_ms.median zoom_ms.zoomed_chart_median "
            "zoom_gesture_ms.every_chart_median zoom_gesture_ms.zoomed_chart_median")))
    else:
        result.update(out["this"])
    result["load_average"] = os.getloadavg()[0]
    result["targets_ms"] = {"first_paint": 200, "first_paint_cpu_browser": 250, "first_paint_4x_throttle": 600,
                            "zoom": 30, "js_before_first_paint_kb": 250}
    return report("dashboard", result, args.json, not args.no_save)


if __name__ == "__main__":
    sys.exit(main())
