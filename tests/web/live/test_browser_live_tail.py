"""The common live step draws its new segment only (static/js/livedraw.js): a live point inside the scales drawn is
stroked onto the chart's canvas, which is neither cleared nor drawn again in full; the new segment's pixels appear
where the point is, and hover on the newest point shows its value (uPlot's data brought up to date lazily). A change
of the marks is placed over and under the canvas (static/js/plotmarks.js) without drawing the chart again."""

import pytest

from observatory import contract

from ..servers import live_run, page_errors, wait_trace

pytestmark = [pytest.mark.browser, pytest.mark.slow]

LOSS = "chart-train-loss"
# The loss chart canvas's clears (uPlot clears the whole canvas before each full draw), counted from the first call
CLEARS = f"""() => {{ const c = document.querySelector('#{LOSS} canvas').getContext('2d');
  if (c.obsClears === undefined) {{
    c.obsClears = 0; const clear = c.clearRect;
    c.clearRect = function (...a) {{ c.obsClears++; return clear.apply(this, a); }};
  }}
  return c.obsClears; }}"""
# The canvas pixel nearest the line's colour in the column at step `s` (x), and where the value `v` is drawn (y):
# [its distance from the line's colour (0: the colour), its row, the row of v] (canvas pixels)
COLUMN = f"""([s, v]) => {{
  const g = document.getElementById('{LOSS}'), box = Obs.figureBox(g), dpr = devicePixelRatio || 1;
  const canvas = g.querySelector('canvas'), [lo, hi] = g.layout.yaxis.range;
  const x = Math.round((box.left + Obs.figureX(g, s)) * dpr);
  const want = [31, 95, 191]; // Obs.lineColor(0), light theme
  const px = canvas.getContext('2d').getImageData(x, 0, 1, canvas.height).data;
  let best = [Infinity, -1];
  for (let y = Math.round(box.top * dpr); y < Math.round((box.top + box.height) * dpr); y++) {{
    const d = px[4 * y + 3] < 128 ? Infinity : want.reduce((a, c, i) => a + Math.abs(c - px[4 * y + i]), 0);
    if (d < best[0]) best = [d, y];
  }}
  return [best[0], best[1], (box.top + (1 - (v - lo) / (hi - lo)) * box.height) * dpr];
}}"""

# The pixels of the plot area's columns between steps a and b (their ends left out) that change, by more than a
# rounding, when the same figure is redrawn in full (Obs.redrawData: uPlot's setData, same scales)
SAME_AS_FULL = f"""([a, b]) => {{
  const g = document.getElementById('{LOSS}'), box = Obs.figureBox(g), dpr = devicePixelRatio || 1;
  const c = g.querySelector('canvas').getContext('2d');
  const x0 = Math.ceil((box.left + Obs.figureX(g, a)) * dpr) + 2;
  const x1 = Math.floor((box.left + Obs.figureX(g, b)) * dpr) - 2;
  const y0 = Math.round(box.top * dpr), h = Math.round(box.height * dpr);
  const tail = c.getImageData(x0, y0, x1 - x0, h).data;
  Obs.redrawData(g);
  return new Promise((done) => queueMicrotask(() => {{
    const full = c.getImageData(x0, y0, x1 - x0, h).data, out = [];
    for (let i = 0; i < full.length; i++) if (Math.abs(full[i] - tail[i]) > 8) out.push([i >> 2, full[i], tail[i]]);
    done(out.slice(0, 20));
  }}));
}}"""


def open_live_dashboard(servers, new_page, run_id):
    """The run's dashboard at 1400 x 900, once it is live and its charts are drawn; the page and its errors."""
    page = new_page(viewport={"width": 1400, "height": 900})
    errors = page_errors(page)
    page.goto(f"{servers.url}/runs/{run_id}/")
    page.wait_for_function("() => document.getElementById('stat-conn').textContent === 'live' && "
                           "performance.getEntriesByName('obs-charts-drawn').length > 0", timeout=60_000)
    return page, errors


def test_a_live_point_inside_the_scales_draws_its_segment_alone_and_hover_reads_it(trainer, servers, new_page,
                                                                                   run_id):
    live_run(trainer, servers, run_id, "live tail")  # a loss falling from 4.0 to 3.005 over steps 0..199
    page, errors = open_live_dashboard(servers, new_page, run_id)
    point = lambda s, v: trainer.metrics(s, **{contract.M_LOSS: v})  # noqa: E731

    point(200, 3.5)  # the first live point: the x axis takes room ahead (a new x range: drawn in full)
    wait_trace(page, LOSS, "x.includes(200)")
    page.wait_for_function(f"() => document.getElementById('{LOSS}').layout.xaxis.range[1] > 203", timeout=30_000)
    clears, tails = page.evaluate(CLEARS), page.evaluate("() => Obs.redrawCounts.tail")

    point(201, 3.6)
    wait_trace(page, LOSS, "x.includes(201)")
    before = page.evaluate(COLUMN, [201.5, 3.575])
    assert before[0] > 60, f"no line yet past the last point: {before}"

    point(202, 3.55)
    wait_trace(page, LOSS, "x.includes(202)")
    assert page.evaluate(CLEARS) == clears, "points inside the scales drawn: the canvas is not cleared and redrawn"
    assert page.evaluate("() => Obs.redrawCounts.tail") >= tails + 2, "both drawn as their new segments alone"
    after = page.evaluate(COLUMN, [201.5, 3.575])
    assert after[0] < 60, f"the new segment's pixels, in the line's colour: {after}"
    assert after[1] == pytest.approx(after[2], abs=3 * (page.evaluate("devicePixelRatio") or 1)), after
    # drawn as uPlot draws it: the full redraw of the same figure paints the segment's pixels the same (between its
    # ends: at the joint uPlot's one path has a round join where the segment starts anew)
    assert page.evaluate(SAME_AS_FULL, [201, 202]) == [], "the tail's pixels are the full redraw's"

    # hover on the newest point: its step and value
    box = page.evaluate(f"""() => {{ const g = document.getElementById('{LOSS}'), b = Obs.figureBox(g),
        r = g.getBoundingClientRect();
        return [r.left + b.left + Obs.figureX(g, 202), r.top + b.top + b.height / 2]; }}""")
    page.mouse.move(box[0] - 40, box[1])
    page.mouse.move(box[0], box[1], steps=4)
    page.wait_for_function(f"""() => {{ const t = document.querySelector('#{LOSS} .chart-hover');
        return t && !t.hidden && t.textContent.includes('202') && t.textContent.includes('3.55'); }}""",
                           timeout=30_000)
    assert errors == []


# The loss chart's vertical marks as placed (plotmarks.js): [where: "over" or "under" uPlot's canvas, left and right
# edge from the plot area's left, CSS px]
SHAPES = f"""() => {{ const g = document.getElementById('{LOSS}');
  const o = g.querySelector('.u-over').getBoundingClientRect();
  return [...g.querySelectorAll('.u-over .shapes i, .u-under .shapes i')].map((e) => {{
    const r = e.getBoundingClientRect();
    return [e.closest('.u-over') ? 'over' : 'under', r.left - o.left, r.right - o.left]; }}); }}"""


def test_a_change_of_the_marks_is_placed_over_the_canvas_which_is_not_drawn_again(trainer, servers, new_page, run_id):
    """In a detector storm a live chart's marks change at almost every step: a mark line and a band that come with
    a live point are placed as elements (the line over the canvas, the band under it) at their steps, and the canvas
    is only stroked with the new segment, not cleared and drawn again."""
    live_run(trainer, servers, run_id, "live marks alone")
    page, errors = open_live_dashboard(servers, new_page, run_id)
    trainer.metrics(200, **{contract.M_LOSS: 3.5})  # the first live point: room ahead on x (drawn in full)
    wait_trace(page, LOSS, "x.includes(200)")
    page.wait_for_function(f"() => document.getElementById('{LOSS}').layout.xaxis.range[1] > 203", timeout=30_000)
    clears = page.evaluate(CLEARS)

    page.evaluate(f"""() => Obs.setOverlays('test', [
      {{id: 'line', x0: 150, label: 'mark 150', metric: '{contract.M_LOSS}'}},
      {{id: 'band', x0: 100, x1: 120, metric: '{contract.M_LOSS}'}}])""")
    trainer.metrics(201, **{contract.M_LOSS: 3.6})
    wait_trace(page, LOSS, "x.includes(201)")
    page.wait_for_function(f"() => ({SHAPES})().length === 2", timeout=30_000)
    page.locator(f"#{LOSS} .mark-label", has_text="mark 150").wait_for(timeout=30_000)
    assert page.evaluate(CLEARS) == clears, "the marks changed with a live point: the canvas is not drawn again"

    at = page.evaluate(f"() => [150, 100, 120].map((s) => Obs.figureX(document.getElementById('{LOSS}'), s))")
    (where_b, b0, b1), (where_l, l0, l1) = sorted(page.evaluate(SHAPES), key=lambda s: s[0] != "under")
    assert where_b == "under" and where_l == "over", "the band under the lines, the mark line over them"
    assert b0 == pytest.approx(at[1], abs=1) and b1 == pytest.approx(at[2], abs=1), (b0, b1, at)
    assert (l0 + l1) / 2 == pytest.approx(at[0], abs=1), (l0, l1, at)
    assert errors == []


# Strokes on the loss chart's canvas, counted from the first call; each step's canvas pixel column (x) as drawn
STROKES = CLEARS.replace("obsClears", "obsStrokes").replace("clearRect", "stroke")
COLUMNS = f"""(steps) => steps.map((s) =>
  Math.round(Obs.figureX(document.getElementById('{LOSS}'), s) * (devicePixelRatio || 1)))"""


def test_a_live_point_inside_its_columns_drawn_pixels_strokes_nothing(trainer, servers, new_page, run_id):
    """In a long run a pixel column holds many steps: a live point whose pixel lies inside the span its column
    already has drawn changes nothing, so nothing is stroked for it; the segment from it is drawn with the next
    column's point, its pixels those of a full redraw."""
    live_run(trainer, servers, run_id, "live columns", steps=2000)  # ~3 steps a pixel column
    page, errors = open_live_dashboard(servers, new_page, run_id)
    point = lambda s, v: trainer.metrics(s, **{contract.M_LOSS: v})  # noqa: E731
    point(2000, -5.0)  # the first live point: room ahead on x (drawn in full)
    wait_trace(page, LOSS, "x.includes(2000)")
    page.wait_for_function(f"() => document.getElementById('{LOSS}').layout.xaxis.range[1] > 2040", timeout=30_000)
    steps = list(range(2000, 2080))
    col = dict(zip(steps, page.evaluate(COLUMNS, steps)))
    s = next(s for s in steps if col[s] >= col[2000] + 6 and col[s] == col[s + 2])  # three steps in one column
    t = next(t for t in steps if col[t] >= col[s] + 10)
    assert t < page.evaluate(f"() => document.getElementById('{LOSS}').layout.xaxis.range[1]")

    strokes = page.evaluate(STROKES)
    point(s, -5.2)  # a new column
    wait_trace(page, LOSS, f"x.includes({s})")
    point(s + 1, -5.6)  # its span grows
    wait_trace(page, LOSS, f"x.includes({s + 1})")
    drawn, tails = page.evaluate(STROKES), page.evaluate("() => Obs.redrawCounts.tail")
    assert drawn > strokes, "points that change the column's pixels are stroked"
    point(s + 2, -5.4)  # inside the span drawn
    wait_trace(page, LOSS, f"x.includes({s + 2})")
    page.wait_for_function(f"() => Obs.redrawCounts.tail > {tails}", timeout=30_000)
    assert page.evaluate(STROKES) == drawn, "a point inside its column's drawn pixels: nothing stroked"

    point(t, -5.3)  # the next column: the segment from the last point drawn with it
    wait_trace(page, LOSS, f"x.includes({t})")
    assert page.evaluate(STROKES) > drawn
    # from the point not stroked (its value, not the one before it), as the full redraw draws it (between the ends:
    # where separate strokes meet, uPlot's one path has round joins)
    assert page.evaluate(SAME_AS_FULL, [s, t]) == [], "the segment's pixels are the full redraw's"
    assert errors == []
