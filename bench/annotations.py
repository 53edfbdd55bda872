"""Annotations on a live dashboard, measured in a real browser. Prints one JSON object."""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
import urllib.request

from harness import Stack, parser, pct, report, setup_django, wait_http
from pagecost import ws_hook
from stack import load_series

STEPS = 2000  # the runs' loss curves
CSRF = "b" * 32  # a CSRF secret of our choosing: cookie and header agree
HOOK = "window.__ann = {};\n" + ws_hook("""
    const now = Date.now();
    const got = JSON.parse(ev.data);
    for (const f of Array.isArray(got) ? got : [got]) {
      if (f.type === "annotation" && f.event === "upsert") window.__ann[f.annotation ? f.annotation.id : f.id] = now;
    }""")
LABELS_JS = """() => { const d = document.getElementById("chart-train-loss");  // notes' labels hold ✎ (their own,
  // or the hover of a label close marks fold into)
  return d && d.layout ? (d.layout.annotations || []).map((a) => String(a.text) + " " + String(a.hovertext || ""))
    .filter((t) => t.includes("✎")) : []; }"""
DATA_JS = """() => { const d = document.getElementById("chart-train-loss");
  return !!(d && d.data && d.data[0] && d.data[0].x.length > 0); }"""


def world(runs: list[str], many: int, members: int) -> list[str]:
    """Runs with a loss curve (`runs[0]` gets `many` annotations), and signed-in members' session keys."""
    from django.contrib.auth import get_user_model
    from django.test import Client

    from observatory import contract
    from webapp.accounts import roles
    from webapp.annotations.models import Annotation
    from webapp.runs.models import Run

    for run_id in runs:
        run = Run.objects.create(id=run_id, name="annotations bench", last_step=STEPS - 1, state="training")
        load_series(run, contract.M_LOSS, ((s, 4.0 / (1 + s / 300)) for s in range(STEPS)))
    author = get_user_model().objects.create_user("bench-author", "a@example.org", "x" * 16)
    Annotation.objects.bulk_create(
        Annotation(run_id=runs[0], author=author, title=f"note {i}", body="b", body_html="<p>b</p>",
                   step_start=(i * 7) % STEPS, step_end=min(STEPS - 1, (i * 7) % STEPS + (i % 2) * 15))
        for i in range(many))
    sessions = []
    for i in range(members):
        user = get_user_model().objects.create_user(f"bench-member-{i}", f"m{i}@example.org", "x" * 16)
        roles.grant(user, "member")
        client = Client()
        client.force_login(user)
        sessions.append(client.cookies["sessionid"].value)
    return sessions


def _post(base: str, run_id: str, session: str, title: str, step: int) -> float:
    body = json.dumps({"title": title, "body": "measured", "step_start": step, "step_end": step + 20}).encode()
    req = urllib.request.Request(f"{base}/api/runs/{run_id}/annotations/", data=body, method="POST", headers={
        "Content-Type": "application/json", "X-CSRFToken": CSRF, "Cookie": f"sessionid={session}; csrftoken={CSRF}"})
    t = time.time() * 1000.0
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 201, resp.status
        _post.last_id = json.loads(resp.read())["id"]
    return t


def _drawn_after(page, title: str) -> float:
    """Date.now() at the first animation frame where the loss chart labels the note `title`."""
    page.wait_for_function(f"() => ({LABELS_JS})().some((t) => t.includes({json.dumps(title)})) "
                           "? (window.__drawnAt = Date.now()) : false", polling="raf", timeout=30_000)
    return page.evaluate("() => window.__drawnAt")


def _pans(page) -> float:
    """The median of 10 pans of the loss chart with its labels (uPlot's setScale; before issue 46, Plotly.relayout)."""
    return page.evaluate("""async () => {
      const d = document.getElementById("chart-train-loss"), out = [];
      for (let i = 0; i < 10; i++) {
        const t = performance.now();
        d._figure.u.setScale("x", {min: i * 100, max: i * 100 + 800}); // uPlot draws in a microtask
        await Promise.resolve();
        out.push(performance.now() - t);
      }
      out.sort((a, b) => a - b);
      return out[5];
    }""")


def measure(posts: int, many: int, server: str) -> dict:
    with Stack("annotations") as stack:
        os.environ.update(stack.site().env)
        setup_django()
        members = max(1, (posts + 7) // 8)  # the posting rate limit is 10/min per member
        many_run, live_run, bare_run = "bench-ann-many", "bench-ann-live", "bench-ann-bare"
        sessions = world([many_run, live_run, bare_run], many, members)
        base = f"http://127.0.0.1:{stack.web(server).port}"
        out: dict = {"server": server, "posts": posts, "annotations": many}
        wait_http(f"{base}/api/runs/")
        browser = stack.browser()

        def open_page(run_id):
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.add_init_script(HOOK)
            page.goto(f"{base}/runs/{run_id}/")
            return page

        page = open_page(live_run)
        page.wait_for_function("() => document.getElementById('stat-conn').textContent === 'live'", timeout=30_000)
        page.wait_for_function(DATA_JS, timeout=30_000)
        page.wait_for_function("() => document.getElementById('ann-hint').textContent !== ''")
        frame, drawn = [], []
        for i in range(posts):
            title = f"live {i}"
            t = _post(base, live_run, sessions[i // 8], title, 10 * i)
            drawn.append(_drawn_after(page, title) - t)
            frame.append(page.evaluate(f"() => window.__ann[{_post.last_id}]") - t)
        out["live"] = {"frame_p50_ms": round(pct(frame, 50), 1), "frame_p99_ms": round(pct(frame, 99), 1),
                       "drawn_p50_ms": round(pct(drawn, 50), 1), "drawn_p99_ms": round(pct(drawn, 99), 1),
                       "drawn_max_ms": round(max(drawn), 1), "target_ms": 1000}
        page.close()

        for label, run_id, n in (("without", bare_run, 0), ("with", many_run, many)):
            page = open_page(run_id)
            # (the notes come in one answer and are drawn in one render: close ones fold into one label)
            page.wait_for_function(f"() => ({DATA_JS})() && ({LABELS_JS})().length >= {min(n, 1)}", polling="raf",
                                   timeout=60_000)
            ready = page.evaluate("() => performance.now()")
            res = {"ready_ms": round(ready, 1), "pan_ms": round(_pans(page), 1)}
            if n:
                page.wait_for_function("() => document.getElementById('stat-conn').textContent === 'live'")
                t = _post(base, run_id, sessions[-1], "one more", 1500)
                res["new_drawn_ms"] = round(_drawn_after(page, "one more") - t, 1)
            out[f"{label}_annotations"] = res
            page.close()
        out["mean_frame_ms"] = round(statistics.fmean(frame), 1) if frame else None
        return out


def main() -> int:
    ap = parser(__doc__, "annotations")
    ap.add_argument("--posts", type=int, default=24)
    ap.add_argument("--many", type=int, default=1000)
    ap.add_argument("--server", choices=("uvicorn", "daphne"), default="uvicorn")
    args = ap.parse_args()
    print(f"measuring {args.posts} live annotations and a run with {args.many} ...", file=sys.stderr)
    return report("annotations", measure(args.posts, args.many, args.server), args.json, not args.no_save)


if __name__ == "__main__":
    sys.exit(main())
