"""First paint without Plotly: the dashboard's charts in view draw their history with the light renderer
(static/js/sketch.js) while Plotly's bundle is still on its way, and become full Plotly charts in place once it
arrives (templates/runs/_chart_scripts.html, Obs.plotly in plotkit.js). The bundle's route is held here until
the first paint has been checked: a page that waited for Plotly would never paint."""

import math

import pytest

from observatory import contract

from .conftest import seed_series

pytestmark = [pytest.mark.browser, pytest.mark.slow]

STEPS, NAN_STEP = 20_000, 7_000
PLOTLY = "**/vendor/plotly-cartesian*.js"
# What the page came with for a series (its inline first window): finite points and non-finite steps.
INLINE = """(name) => { const w = JSON.parse(document.getElementById('page-data').textContent).initial_windows[name];
  return {finite: w.values.filter((v) => v !== null).length, nonfinite: w.values.filter((v) => v === null).length}; }"""
# A chart's light drawing: its lines (points each, and the path's own count of L/M commands) and marks.
SKETCH = """(id) => { const p = document.getElementById(id), svg = p && p.querySelector('svg.sketch');
  if (!svg) return null;
  const lines = [...svg.querySelectorAll('.sk-line')].map((l) => ({points: +l.dataset.points,
    stroke: l.getAttribute('stroke'),
    commands: (l.getAttribute('d').match(/[ML]/g) || []).length}));
  const marks = [...svg.querySelectorAll('.sk-marks')].map((m) => ({points: +m.dataset.points,
    top: m.getBoundingClientRect().top - svg.querySelector('.sk-grid').getBoundingClientRect().top}));
  const ticks = [...svg.querySelectorAll('.sk-ticks text[data-axis="y"]')].map((t) => t.textContent);
  const box = svg.getBoundingClientRect();
  return {lines, marks, ticks, width: box.width, height: box.height}; }"""


def loss(step: int) -> float:
    return float("nan") if step == NAN_STEP else 3.0 + 0.25 * math.sin(step / 50.0)


@pytest.fixture
def run(live_env):
    from webapp.runs.models import Run

    run = Run.objects.create(id="paint", name="first paint", state="training", last_step=STEPS - 1)
    seed_series(run, contract.M_LOSS, ((s, loss(s)) for s in range(STEPS)))
    seed_series(run, contract.M_LR, ((s, 1e-3 * (1 + 9 * s / STEPS)) for s in range(STEPS)))
    return run


def test_charts_paint_before_plotly_loads_then_become_plotly_charts(run, web, new_page):
    page = new_page(viewport={"width": 1280, "height": 800})
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    gate = {"open": False, "held": []}  # Plotly's bundle waits here until the first paint has been checked
    page.route(PLOTLY, lambda route: route.continue_() if gate["open"] else gate["held"].append(route))
    page.goto(f"{web.url}/runs/paint/?log={contract.M_LR}")
    page.wait_for_function("() => performance.getEntriesByName('obs-first-paint').length > 0", timeout=30_000)
    assert page.evaluate("() => typeof window.Plotly") == "undefined", "first paint came before Plotly"

    want = page.evaluate(INLINE, contract.M_LOSS)
    assert want == {"finite": want["finite"], "nonfinite": 1} and want["finite"] > 500
    drawn = page.evaluate(SKETCH, "chart-train-loss")
    assert drawn is not None, "the loss chart is drawn by the light renderer"
    assert drawn["width"] > 300 and drawn["height"] > 150
    first = drawn["lines"][0]
    assert first["points"] == want["finite"] == first["commands"], "every point of the first window is drawn"
    assert first["stroke"] == "#1f5fbf", "in the chart's first colour"
    assert [m["points"] for m in drawn["marks"]] == [1], "the NaN step: one mark"
    assert drawn["marks"][0]["top"] < 20, "the non-finite mark sits at the top of the plot"
    assert len(drawn["ticks"]) >= 3, "a y axis with tick labels"
    lr = page.evaluate(SKETCH, "chart-optim-learning-rate")
    assert lr["lines"][0]["points"] == page.evaluate(INLINE, contract.M_LR)["finite"]
    assert lr["marks"] == []
    # the learning rate's log axis (1e-3..1e-2): powers of ten labelled as Plotly's "e" format does, no 0
    assert "1e−3" in lr["ticks"] and "0" not in lr["ticks"]

    # Plotly arrives: the same charts become Plotly charts in place, the same points in them.
    gate["open"] = True
    for route in gate["held"]:  # (a request not yet routed goes through when it is)
        route.continue_()
    page.wait_for_function("() => performance.getEntriesByName('obs-plotly-drawn').length > 0", timeout=30_000)
    after = page.evaluate("""() => { const p = document.getElementById('chart-train-loss');
      return {sketch: !!p.querySelector('svg.sketch'), plotly: !!p.querySelector('.main-svg'),
              modebar: !!p.querySelector('.modebar'), x: p.data[0].x.length,
              marks: p.data.find((t) => t.name.endsWith('non-finite')).x.length,
              lrType: document.getElementById('chart-optim-learning-rate')._fullLayout.yaxis.type}; }""")
    assert after == {"sketch": False, "plotly": True, "modebar": True, "x": want["finite"], "marks": 1, "lrType": "log"}
    assert errors == []
