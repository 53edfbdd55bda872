"""First paint with no Plotly at all: the dashboard's charts in view draw their history with the one line renderer
(static/js/plot.js over the vendored uPlot) from the page's inline first windows; Plotly's bundle is never fetched
for a run without a router panel (templates/runs/_chart_head.html, loadPlotly in moe.js)."""

import math

import pytest

from observatory import contract

from .conftest import seed_series

pytestmark = [pytest.mark.browser, pytest.mark.slow]

STEPS, NAN_STEP = 20_000, 7_000
# What the page came with for a series (its inline first window): finite points and non-finite steps.
INLINE = """(name) => { const w = JSON.parse(document.getElementById('page-data').textContent).initial_windows[name];
  return {finite: w.values.filter((v) => v !== null).length, nonfinite: w.values.filter((v) => v === null).length}; }"""
# A chart as drawn: its figure (plot.js: node.data, node.layout) and its canvas.
DRAWN = """(id) => { const p = document.getElementById(id), c = p && p.querySelector('.uplot canvas');
  if (!c || !p.data) return null;
  const r = c.getBoundingClientRect(), lines = p.data.filter((t) => t.mode === 'lines');
  return {lines: lines.map((t) => ({points: t.x.length, stroke: t.line.color})),
          marks: p.data.filter((t) => t.mode === 'markers' && t.name.endsWith('non-finite')).map((t) => t.x.length)
            .filter((n) => n > 0),
          ticks: p.layout.yaxis.ticklabels || [], yType: p.layout.yaxis.type, width: r.width, height: r.height,
          modebar: !!p.querySelector('.modebar')}; }"""


def loss(step: int) -> float:
    return float("nan") if step == NAN_STEP else 3.0 + 0.25 * math.sin(step / 50.0)


@pytest.fixture
def run(live_env):
    from webapp.runs.models import Run

    run = Run.objects.create(id="paint", name="first paint", state="training", last_step=STEPS - 1)
    seed_series(run, contract.M_LOSS, ((s, loss(s)) for s in range(STEPS)))
    seed_series(run, contract.M_LR, ((s, 1e-3 * (1 + 9 * s / STEPS)) for s in range(STEPS)))
    return run


def test_charts_paint_without_plotly_from_the_inline_windows(run, web, new_page):
    page = new_page(viewport={"width": 1280, "height": 800})
    errors, plotly = [], []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.on("request", lambda r: "plotly" in r.url and plotly.append(r.url))
    page.goto(f"{web.url}/runs/paint/?log={contract.M_LR}")
    page.wait_for_function("() => performance.getEntriesByName('obs-first-paint').length > 0", timeout=30_000)
    assert page.evaluate("() => typeof window.Plotly") == "undefined", "first paint without Plotly"

    want = page.evaluate(INLINE, contract.M_LOSS)
    assert want == {"finite": want["finite"], "nonfinite": 1} and want["finite"] > 500
    drawn = page.evaluate(DRAWN, "chart-train-loss")
    assert drawn is not None, "the loss chart is drawn"
    assert drawn["width"] > 300 and drawn["height"] > 150 and drawn["modebar"]
    first = drawn["lines"][0]
    assert first["points"] == want["finite"], "every point of the first window is drawn"
    assert first["stroke"] == "#1f5fbf", "in the chart's first colour"
    assert drawn["marks"] == [1], "the NaN step: one mark"
    assert len(drawn["ticks"]) >= 3, "a y axis with tick labels"
    lr = page.evaluate(DRAWN, "chart-optim-learning-rate")
    assert lr["lines"][0]["points"] == page.evaluate(INLINE, contract.M_LR)["finite"]
    assert lr["marks"] == []
    # the learning rate's log axis (1e-3..1e-2, one decade): plain numbers like their neighbours' (not 1e−3), no 0
    assert lr["yType"] == "log" and "0.001" in lr["ticks"] and "0" not in lr["ticks"], lr["ticks"]
    assert plotly == [], "no Plotly for line charts"
    assert errors == []
