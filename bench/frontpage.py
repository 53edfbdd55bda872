"""First paint of the front page (the featured run's live chart, moments, experiments): the landed commit's `/`
against this checkout's, both served in the same run from the same database. Prints one JSON object.

    .venv/bin/python bench/frontpage.py [--json] [--base COMMIT] [--steps 200000] [--runs 20] [--repeat 7]

What it measures and how: docs/PERFORMANCE.md, `frontpage` (bench/results/frontpage.md).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys

from harness import ROOT, Stack, django_here, med, parser, report, web_server
from stack import landed_tree, load_series

RUN_ID = "bench-front"


def seed(steps: int, runs: int) -> None:
    from webapp.anomalies.models import Anomaly
    from webapp.annotations.models import Annotation
    from webapp.metrics.models import Series
    from webapp.runs.models import Run

    if Series.objects.filter(run_id=RUN_ID, name="train/loss", count=steps).exists():
        return
    Run.objects.filter(pk__startswith="bench-front").delete()
    hb = {"tokens": steps * 4096, "token_budget": 2 * steps * 4096, "eta_s": 3600.0, "steps_per_s": 4.0}
    run = Run.objects.create(id=RUN_ID, name="front-page benchmark", state="training", health="alive",
                             last_step=steps - 1, heartbeat=hb)
    load_series(run, "train/loss", ((i, 2.0 + 3.0 / math.sqrt(1 + i / 500)) for i in range(steps)))
    Anomaly.objects.create(run=run, key="loss_spike train/loss 77", kind="loss_spike", metric="train/loss",
                           start_step=77, peak_step=77, detected_step=77, severity="warning", score=3.0,
                           explanation="loss 9 at step 77 is 3x its running level")
    Annotation.objects.create(run=run, title="spike at 77", body="a bad batch?", body_html="<p>a bad batch?</p>",
                              step_start=70, step_end=80)
    for i in range(runs):
        Run.objects.create(id=f"bench-front-{i:03d}", name=f"other {i}", state="stopped", health="ended",
                           last_step=1000 + i)


def measure(url: str, ready_js: str, repeat: int) -> dict:
    fcp, ready, errors = [], [], []
    with Stack("frontpage-browser") as browsers:
        browser = browsers.browser()
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


def main() -> int:
    ap = parser(__doc__, db="front")
    ap.add_argument("--base", default=None, help="the landed commit (default: merge-base HEAD main)")
    ap.add_argument("--steps", type=int, default=200_000)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    base = args.base or subprocess.check_output(["git", "merge-base", "HEAD", "main"], cwd=ROOT, text=True).strip()
    env = django_here(args.db)
    seed(args.steps, args.runs)
    out = {"base": base[:12], "steps": args.steps, "runs": args.runs + 1, "repeat": args.repeat}
    with landed_tree(base) as landed:
        ready_js = ("() => !!document.querySelector('#front-chart .main-svg, #front-chart .uplot') && "
                    "document.querySelectorAll('#moments li.moment').length >= 2")
        for name, tree in (("landed", landed), ("front", ROOT)):
            with web_server({**env, "PYTHONPATH": str(tree)}, cwd=tree) as server:
                out[name] = measure(f"http://127.0.0.1:{server.port}/", ready_js, args.repeat)
    out["fcp_ratio_front_over_landed"] = round(out["front"]["fcp_ms"] / out["landed"]["fcp_ms"], 2)
    out["ready_ratio_front_over_landed"] = round(out["front"]["ready_ms"] / out["landed"]["ready_ms"], 2)
    out["load1"] = round(os.getloadavg()[0], 2)
    report("frontpage", out, args.json, not args.no_save)
    return 0


if __name__ == "__main__":
    sys.exit(main())
