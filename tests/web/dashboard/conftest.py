"""Dashboard browser tests: runs seeded straight into storage (no trainer, no ingest), one uvicorn to serve them."""

from __future__ import annotations

import json
import threading
import urllib.request
from pathlib import Path

import pytest

from ..servers import free_port, start_web, stop, wait_port


@pytest.fixture
def web(live_env):
    """The site (uvicorn) on the test database: `web.url`; data written before the browser starts is seen."""
    port = free_port()
    proc = start_web(port, live_env)
    wait_port(port)

    class Web:
        url = f"http://127.0.0.1:{port}"

        def api(self, path: str) -> dict:
            with urllib.request.urlopen(self.url + path, timeout=30) as r:
                return json.loads(r.read())

    yield Web()
    stop(proc)


def in_thread(fn):
    """Run Django database work from a test whose thread hosts Playwright's event loop (where Django refuses
    synchronous database calls): in a thread of its own, re-raising its error."""
    out = {}

    def run():
        from django.db import connection

        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001 (handed back to the test)
            out["error"] = e
        finally:
            connection.close()

    t = threading.Thread(target=run)
    t.start()
    t.join(60)
    if "error" in out:
        raise out["error"]
    return out.get("value")


def seed_series(run, name: str, points) -> None:
    """A whole series through webapp/metrics/storage.bulk_load (how a long history gets in fast)."""
    from django.db import transaction

    from webapp.metrics import storage
    from webapp.metrics.models import Series

    s, _ = Series.objects.get_or_create(run=run, name=name)
    with transaction.atomic():
        storage.bulk_load(s.id, points)


# Elements wider than the viewport, or reaching past its right edge, that no scrolling box of their own contains.
OVERFLOW_JS = """() => {
  const vw = document.documentElement.clientWidth, bad = [];
  const clipped = (el) => { for (let p = el.parentElement; p && p !== document.body; p = p.parentElement) {
      const o = getComputedStyle(p).overflowX;
      if (o === 'auto' || o === 'scroll' || o === 'hidden') return p.getBoundingClientRect().right <= vw + 1;
    } return false; };
  for (const el of document.body.querySelectorAll('*')) {
    const r = el.getBoundingClientRect();
    if (!r.width || getComputedStyle(el).visibility === 'hidden') continue;
    if (r.right <= 0) continue;  // parked off-screen on purpose (Plotly's text-measuring svg): never seen
    const cls = el.className && el.className.baseVal !== undefined ? el.className.baseVal : el.className;
    const where = ' ' + Math.round(r.left) + '..' + Math.round(r.right);
    if ((r.right > vw + 1 || r.left < -1) && !clipped(el)) bad.push(el.tagName.toLowerCase() +
      (el.id ? '#' + el.id : '') + '.' + String(cls).slice(0, 40) + where);
  }
  return {scrollWidth: document.documentElement.scrollWidth, viewport: vw, bad: bad.slice(0, 20)};
}"""

AXE_JS = """async () => {
  const r = await axe.run(document, {runOnly: {type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa']}});
  return r.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical')
    .map((v) => ({id: v.id, impact: v.impact,
                  nodes: v.nodes.slice(0, 5).map((n) => n.target.join(' ') + ' :: ' + n.failureSummary)}));
}"""


# axe-core is a test-only asset: vendored under tests/assets/, never under static/ (collectstatic would ship it).
AXE = Path(__file__).resolve().parents[2] / "assets" / "axe.min.js"
AXE_URL = "/__tests__/axe.min.js"  # a same-origin address (the page's CSP allows 'self' scripts) answered by the test


def axe_violations(page) -> list:
    """Serious and critical WCAG 2.1 A/AA violations on the page (axe-core, from tests/assets, served to the page
    at a same-origin address by a Playwright route: the site itself serves no test asset)."""
    page.route("**" + AXE_URL, lambda route: route.fulfill(path=AXE, content_type="text/javascript"))
    try:
        page.add_script_tag(url=AXE_URL)
    finally:
        page.unroute("**" + AXE_URL)
    return page.evaluate(AXE_JS)


def apply(run_id: str, msgs) -> None:
    """Contract messages [(kind, data)] through ingest's own apply_messages (events, heartbeats, manifest...)."""
    from django.db import transaction

    from observatory import contract
    from webapp.metrics.apply import apply_messages

    with transaction.atomic():
        apply_messages([("", contract.decode(contract.encode(run_id, kind, data))) for kind, data in msgs])


DOMAINS = ("code", "prose")


def demo_messages(run_id: str, steps: int = 60, experts: int = 4, hole: tuple = ()) -> list:
    """A small MoE run told the way a trainer tells it: start, compile, metrics (router loads per layer and expert,
    per-domain losses, mixture), routine checkpoints, an operator command, a restart that redoes a few steps,
    a heartbeat. `hole`: (layer, expert, first, last) steps that expert did not report."""
    from observatory import contract as c

    t = 1_767_225_600.0  # 2026-01-01
    msgs = [("run", {"t": t, "name": "demo", "config": {"train": {"peak_flops": 0.0}}, "started_at": t}),
            ("state", {"t": t, "state": "starting", "step": 0, "detail": ""}),
            ("manifest", {"t": t, "manifest": {"seq_len": 128, "batch_size": 8, "token_budget": steps * 2048,
                          "domains": [{"name": d, "documents": 10, "bytes": 1000, "tokens": 1000,
                                       "sources": [{"kind": "glob", "pattern": f"/srv/corpus/{d}/*.txt"}]}
                                      for d in DOMAINS],
                          "stages": [{"name": "pretrain", "fraction": 0.8, "start_tokens": 0, "end_tokens": 1,
                                      "weights": {d: 0.5 for d in DOMAINS}}]}}),
            ("state", {"t": t + 1, "state": "compiling", "step": 0, "detail": ""}),
            ("event", {"t": t + 5, "step": 0, "name": "compiled", "payload": {
                "seconds": 4.0, "peak_flops": 1.2e12, "peak_flops_source": "cpu assumption: 2 cores",
                "flops_per_token": 1e6, "devices": "1 x cpu"}}),
            ("state", {"t": t + 5, "state": "training", "step": 0, "detail": ""})]

    def metrics(step, tt):
        v = {c.M_LOSS: 4.0 - 0.02 * step, c.M_LR: 1e-3, c.M_GRAD_NORM: 1.0, c.M_TOKENS_PER_S: 5e4,
             c.M_MFU: 3.1 if step == 25 else 0.3, c.M_DROP: 0.01, c.M_TOTAL_TOKENS: (step + 1) * 1024.0,
             c.M_MIX_STAGE: 0.0}
        for d in DOMAINS:
            v[c.domain_loss(d)] = 4.1 - 0.02 * step
            v[c.mixture_weight(d)] = 0.5
        for layer in range(2):
            for e in range(experts):
                if hole and (layer, e) == hole[:2] and hole[2] <= step <= hole[3]:
                    continue
                v[c.router_metric(layer, f"routing_hist/{e}")] = float(100 + 10 * e + step)
            v[c.router_metric(layer, "max_mean_load")] = 1.3
            v[c.router_metric(layer, "capacity_overflow_rate")] = 0.02
        return ("metrics", {"t": tt, "step": step, "values": v})

    for step in range(40):
        msgs.append(metrics(step, t + 10 + step))
        if step and step % 5 == 0:
            msgs.append(("event", {"t": t + 10 + step, "step": step, "name": "checkpoint_saved", "payload": {}}))
    msgs.append(("event", {"t": t + 50, "step": 39, "name": "command", "payload": {
        "id": "c1", "command": "set-lr-multiplier", "args": {"multiplier": 0.5}, "reason": "calm the norm"}}))
    # the trainer dies at step 39 and comes back from its step-35 checkpoint
    msgs += [("state", {"t": t + 100, "state": "starting", "step": 0, "detail": ""}),
             ("event", {"t": t + 101, "step": 35, "name": "resumed", "payload": {"from_checkpoint": 35}}),
             ("rewind", {"t": t + 101, "from_step": 39, "to_step": 35}),
             ("state", {"t": t + 102, "state": "training", "step": 35, "detail": ""})]
    for step in range(36, steps):
        msgs.append(metrics(step, t + 70 + step))
    msgs.append(("heartbeat", {"t": t + 70 + steps, "phase": "training", "step": steps - 1,
                               "tokens": steps * 1024, "token_budget": steps * 2048, "eta_s": 3600.0,
                               "steps_per_s": 1.0, "since_step_s": 0.5, "pid": 1}))
    return msgs


def plot_box(page, chart_id: str = "chart-train-loss") -> dict:
    """The client box of a chart's plot area (uPlot's overlay: where a drag zooms)."""
    return page.evaluate(f"""() => {{ const r = document.querySelector('#{chart_id} .u-over').getBoundingClientRect();
      return {{x: r.x, y: r.y, w: r.width, h: r.height}}; }}""")


def drag_zoom(page, frm: float, to: float, chart_id: str = "chart-train-loss") -> None:
    """A real mouse drag-zoom across a chart, from and to fractions of its width, in two moves."""
    box = plot_box(page, chart_id)
    y = box["y"] + box["h"] / 2
    page.mouse.move(box["x"] + frm * box["w"], y)
    page.mouse.down()
    page.mouse.move(box["x"] + (frm + to) / 2 * box["w"], y, steps=5)
    page.mouse.move(box["x"] + to * box["w"], y, steps=5)
    page.mouse.up()
