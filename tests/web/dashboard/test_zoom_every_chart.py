"""A zoom redraws every chart in view with its window: at the moment the page says the zoom is drawn
("obs-zoom-done"), each chart's line shows exactly the API's raw points of the window, in an x axis at the zoomed
range and a y axis that holds them (drawn onto Plotly's lines, zoom.js drawWindow); once Plotly has caught up
("obs-zoom-plotly") its own data and axes say the same, the y axis fitted to the window."""

import random

import pytest

from observatory import contract

from ..servers import page_errors
from .conftest import drag_zoom, seed_series

pytestmark = [pytest.mark.browser, pytest.mark.slow]

STEPS = 100_000
SERIES = (contract.M_LOSS, contract.M_LR, "grad/norm/total")

# Each chart's own line as the page shows it: its drawn path's vertices in data units (Plotly's axes), the axes'
# ranges, and Plotly's data. Taken synchronously when the page marks "obs-zoom-done" (window.__snap), so that
# nothing drawn after it (Plotly's own redraw) is what the test reads.
SNAP_JS = """() => {
  const snap = () => [...document.querySelectorAll('#charts .chart')].map((box) => {
    const gd = box.querySelector('.plot'), fl = gd._fullLayout;
    if (!fl || !gd._fullData || !gd._fullData[0]) return {metric: box.dataset.metric, plotly: false};
    const xa = fl.xaxis, ya = fl.yaxis, r = gd.getBoundingClientRect();
    const path = gd.querySelector('.trace' + gd._fullData[0].uid + ' .js-line');
    const pts = ((path && path.getAttribute('d')) || '').match(/-?[0-9.]+(e-?[0-9]+)?,-?[0-9.]+(e-?[0-9]+)?/g) || [];
    return {metric: box.dataset.metric, plotly: true, visible: r.bottom > 0 && r.top < innerHeight,
            xrange: xa.range.slice(), yrange: ya.range.slice(), plotHeight: ya._length,
            vertices: pts.map((p) => { const [x, y] = p.split(',').map(Number); return [xa.p2c(x), ya.p2c(y), y]; }),
            data: {x: Array.from(gd.data[0].x), y: Array.from(gd.data[0].y)}};
  });
  window.__snapNow = snap;
  const mark = performance.mark.bind(performance);
  performance.mark = (name, ...rest) => {
    if (name === 'obs-zoom-done') window.__snap = snap();
    return mark(name, ...rest);
  };
}"""


@pytest.fixture
def noisy_run(live_env):
    from webapp.runs.models import Run

    run = Run.objects.create(id="noisy", name="noisy run", state="training", last_step=STEPS - 1)
    for name in SERIES:  # noise: no two neighbours on a line, so every point is a vertex of the drawn path
        rnd = random.Random(name)
        seed_series(run, name, ((s, 1.0 + rnd.random()) for s in range(STEPS)))
    return run


def inside(vertices, lo, hi):
    return [(x, y) for x, y, _ in vertices if lo - 0.01 <= x <= hi + 0.01]


def test_every_chart_in_view_is_drawn_with_the_windows_raw_points_when_the_zoom_says_so(noisy_run, web, new_page):
    page = new_page(viewport={"width": 1400, "height": 900})
    errors = page_errors(page)
    page.goto(f"{web.url}/runs/noisy/")
    page.wait_for_function("() => performance.getEntriesByName('obs-plotly-drawn').length > 0", timeout=60_000)
    page.evaluate(SNAP_JS)
    a, b = 61_234, 61_273  # 40 steps: the API answers every raw point
    page.evaluate(f"() => Plotly.relayout('chart-train-loss', {{'xaxis.range': [{a}, {b}]}})")
    page.wait_for_function("() => window.__obsZoom && window.__obsZoom.plotlyMs !== null", timeout=30_000)
    zoom, snap = page.evaluate("() => [window.__obsZoom, window.__snap]")

    shown = {c["metric"]: c for c in snap if c["plotly"] and c["visible"]}
    assert set(SERIES) <= set(shown), "the seeded series' charts are in view"
    assert set(shown) <= set(zoom["charts"]), "every chart in view reported its redraw"
    assert set(SERIES) <= set(zoom["inPlace"]), "drawn onto Plotly's lines, Plotly's redraw after"
    for name in SERIES:
        stored = web.api(f"/api/runs/noisy/metrics/{name}/?start={a}&end={b}&points=100")
        assert stored["exact"] and stored["steps"] == list(range(a, b + 1))
        c = shown[name]
        assert c["xrange"] == [a, b], name
        got = inside(c["vertices"], a, b)
        assert [round(x) for x, _ in got] == stored["steps"], f"{name}: every raw step of the window is drawn"
        # in data units from the drawn pixels (2 decimals): within a hundredth of a pixel's worth of value
        tol = (c["yrange"][1] - c["yrange"][0]) / c["plotHeight"]
        assert all(abs(y - v) <= tol for (_, y), v in zip(got, stored["values"])), f"{name}: values as stored"
        assert all(0 <= py <= c["plotHeight"] for x, _, py in c["vertices"] if a <= x <= b), \
            f"{name}: the y axis holds the window's points"

    # Plotly caught up: its own data and axes are the window's, the y axis fitted to it.
    after = {c["metric"]: c for c in page.evaluate("() => window.__snapNow()") if c["plotly"]}
    for name in SERIES:
        stored = web.api(f"/api/runs/noisy/metrics/{name}/?start={a}&end={b}&points=100")
        c = after[name]
        data = [(x, y) for x, y in zip(c["data"]["x"], c["data"]["y"]) if a <= x <= b]
        assert data == list(zip(stored["steps"], stored["values"])), name
        assert c["xrange"] == [a, b]
        lo, hi = min(stored["values"]), max(stored["values"])
        assert c["yrange"][0] < lo and hi < c["yrange"][1] and c["yrange"][1] - c["yrange"][0] < 1.5 * (hi - lo), name
    assert zoom["plotlyMs"] >= zoom["ms"]

    # A drag-zoom with the mouse (the pointer stays over the chart, hover on): the same, for the chart dragged.
    drag_zoom(page, 0.3, 0.6)
    page.wait_for_function(f"() => window.__obsZoom && window.__obsZoom.plotlyMs !== null && "
                           f"document.getElementById('chart-train-loss')._fullLayout.xaxis.range[1] < {b}",
                           timeout=30_000)
    zoom, snap = page.evaluate("() => [window.__obsZoom, window.__snap]")
    c = next(c for c in snap if c["metric"] == contract.M_LOSS)
    lo, hi = c["xrange"]
    assert a < lo < hi < b and contract.M_LOSS in zoom["inPlace"]
    stored = web.api(f"/api/runs/noisy/metrics/{contract.M_LOSS}/?start={a}&end={b}&points=100")
    want = [(s, v) for s, v in zip(stored["steps"], stored["values"]) if lo <= s <= hi]
    got = inside(c["vertices"], lo, hi)
    assert [round(x) for x, _ in got] == [s for s, _ in want] and len(want) >= 5
    tol = (c["yrange"][1] - c["yrange"][0]) / c["plotHeight"]
    assert all(abs(y - v) <= tol for (_, y), (_, v) in zip(got, want))
    assert errors == []
