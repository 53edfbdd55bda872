"""The dashboard's chart boxes as laid out in Chromium (issue 46's screenshots): a legend sits just above its plot
at phone and desktop widths, smoothing on or off (no blank band, no overlap with the marker labels' row), and a
chart's note never pushes its tool bar off the title's line."""

from __future__ import annotations

import pytest

from ..servers import page_errors
from .conftest import apply, demo_messages
from .test_a11y import shot

pytestmark = [pytest.mark.browser, pytest.mark.slow]

# The room between a legend's bottom and its plot's top (CSS px): the marker labels' row (charts.js LABEL_ROW_PX,
# its labels 12 px high, 4 px above the plot) and a few px; a wrong count of the legend's rows showed as a 45 px
# band at 390 px (2 rows counted for 1), or as the last row over the labels with smoothing on (2 counted for 3).
GAP = (16, 32)
LEGEND_GAP = """() => { const p = document.querySelector('#chart-train-loss'), lg = p.querySelector('.legend'),
  over = p.querySelector('.u-over');
  if (!lg || lg.hidden || !lg.children.length || !over) return null;
  return {gap: over.getBoundingClientRect().top - lg.getBoundingClientRect().bottom,
          rows: new Set([...lg.children].map((i) => Math.round(i.getBoundingClientRect().top))).size}; }"""


@pytest.fixture
def run(live_env):
    apply("demo-a", demo_messages("demo-a"))


@pytest.mark.parametrize("width,height", [(390, 844), (1400, 900)])
@pytest.mark.parametrize("query", ["", "?smooth=0.6"])
def test_a_legend_sits_just_above_its_plot(run, web, new_page, width, height, query):
    page = new_page(viewport={"width": width, "height": height})
    errors = page_errors(page)
    page.goto(f"{web.url}/runs/demo-a/{query}")
    page.wait_for_function(f"() => ({LEGEND_GAP})() !== null", timeout=30_000)
    if query:  # the smoothed lines' names are the legend's: longer, more rows at a phone's width
        page.wait_for_function("() => document.querySelector('#chart-train-loss .legend').textContent"
                               ".includes('(smoothed)')", timeout=30_000)
    got = page.evaluate(LEGEND_GAP)
    assert GAP[0] <= got["gap"] <= GAP[1], got
    assert errors == []


def test_a_charts_note_leaves_its_tools_on_the_title_line(run, web, new_page):
    page = new_page(viewport={"width": 1400, "height": 900})
    page.goto(f"{web.url}/runs/demo-a/")
    tput = '.chart[data-metric="throughput/tokens_per_second"]'
    page.wait_for_function(f"() => document.querySelector('{tput} .note').textContent.includes('MFU hidden')",
                           timeout=30_000)
    heads = page.evaluate("""() => [...document.querySelectorAll('#charts figure.chart')].map((f) => {
      const h3 = f.querySelector('h3').getBoundingClientRect();
      const tools = [...f.querySelectorAll('.chart-tools > *')].map((b) => b.getBoundingClientRect());
      return {metric: f.dataset.metric, note: f.querySelector('.note').textContent,
              onTitleLine: tools.every((b) => b.top < h3.bottom && b.bottom > h3.top)}; })""")
    assert any(h["note"] for h in heads), heads
    assert [h for h in heads if not h["onTitleLine"]] == [], heads


def test_smoothing_draws_a_constant_series_flat(run, web, new_page):
    """The debiased EMA of a constant differs from it in the last bits: drawn to that span, the learning rate zigzagged
    over 1e-19 and the gradient norm chart threw in uPlot's tick splits and stayed empty."""
    page = new_page(viewport={"width": 1400, "height": 900})
    errors = page_errors(page)
    page.goto(f"{web.url}/runs/demo-a/?smooth=0.6")
    spans = """() => Object.fromEntries(['optim-learning-rate', 'grad-norm-total'].map((id) => {
      const u = document.querySelector('#chart-' + id)._figure?.u;
      return [id, u && u.data[1].some((v) => v !== null) ? u.scales.y.max - u.scales.y.min : null]; }))"""
    page.wait_for_function(f"() => Object.values(({spans})()).every((s) => s !== null)", timeout=30_000)
    got = page.evaluate(spans)
    assert got["optim-learning-rate"] > 1e-4 and got["grad-norm-total"] > 0.1, got
    assert errors == []



# Every Path2D stroke of the charts' canvases (uPlot strokes a series' line as one Path2D): its chart, its device px.
STROKES = """window.__strokes = [];
const stroke = CanvasRenderingContext2D.prototype.stroke;
CanvasRenderingContext2D.prototype.stroke = function (path) {
  const fig = this.canvas.closest && this.canvas.closest('.figure');
  if (path instanceof Path2D && fig) window.__strokes.push([fig.id, this.lineWidth]);
  return stroke.apply(this, arguments);
};"""


def test_data_lines_are_hairlines_but_a_shared_charts_own_metric(run, web, new_page):
    """A line wider than one device pixel goes through Skia's stroker and anti-aliased scan conversion, a hairline
    through its fast path: on a 1x screen, 1.5 and 1.1 px lines made a live redraw's canvas work ~2x that of 1 px
    ones (bench/liveview.py, issue 46). Lines are 1 px; only a chart of several lines draws its own metric wider
    (1.5), to tell it from the others."""
    page = new_page(viewport={"width": 1400, "height": 900}, device_scale_factor=1)
    errors = page_errors(page)
    page.add_init_script(STROKES)
    page.goto(f"{web.url}/runs/demo-a/")
    page.wait_for_function("() => performance.getEntriesByName('obs-first-paint').length > 0", timeout=30_000)
    got = page.evaluate("""() => ({strokes: window.__strokes, lines: Object.fromEntries([...document.querySelectorAll(
      '.figure')].filter((d) => d._figure && d._figure.u).map((d) => [d.id, d._figure.lines.length]))})""")
    shot(page, "hairlines-1400.png")
    lines = got["lines"]
    assert len(lines) >= 3 and any(n > 1 for n in lines.values()), got  # (single- and multi-line charts drawn)
    for fig, n in lines.items():
        widths = [w for f, w in got["strokes"] if f == fig]
        assert len(widths) >= n, (fig, widths)
        wide = [w for w in widths if w > 1]
        assert set(wide) <= ({1.5} if n > 1 else set()), (fig, widths)
        assert len(wide) * n <= len(widths), (fig, widths)  # one line a redraw, of n
    assert errors == []
