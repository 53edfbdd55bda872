"""A zoom redraws every chart in view with its window: at the moment the page says the zoom is drawn
("obs-zoom-done"), each chart's figure (plot.js: node.data, node.layout, drawn by uPlot) holds exactly the API's raw
points of the window, in an x axis at the zoomed range and a y axis fitted to them."""

import random
from urllib.parse import parse_qs, urlparse

import pytest

from observatory import contract

from ..servers import page_errors
from .conftest import drag_zoom, seed_series

pytestmark = [pytest.mark.browser, pytest.mark.slow]

STEPS = 100_000
SERIES = (contract.M_LOSS, contract.M_LR, "grad/norm/total")

# Each chart's own line as the page shows it: its figure's first line in data units with each point's pixel height
# in the plot area (from the drawn y range), the axes' ranges as drawn. Taken synchronously when the page marks
# "obs-zoom-done" (window.__snap), so that nothing drawn after it is what the test reads.
SNAP_JS = """() => {
  const snap = () => [...document.querySelectorAll('#charts .chart')].map((box) => {
    const gd = box.querySelector('.plot'), z = Obs.figureBox(gd);
    if (!z || !gd.data || !gd.data[0] || !gd.layout.xaxis.range) return {metric: box.dataset.metric, drawn: false};
    const r = gd.getBoundingClientRect(), yr = gd.layout.yaxis.range.slice(), t = gd.data[0];
    return {metric: box.dataset.metric, drawn: true, visible: r.bottom > 0 && r.top < innerHeight,
            xrange: gd.layout.xaxis.range.slice(), yrange: yr, plotHeight: z.height,
            vertices: Array.from(t.x, (x, i) => [x, t.y[i], (1 - (t.y[i] - yr[0]) / (yr[1] - yr[0])) * z.height]),
            data: {x: Array.from(t.x), y: Array.from(t.y)}};
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
    page.wait_for_function("() => performance.getEntriesByName('obs-charts-drawn').length > 0", timeout=60_000)
    page.evaluate(SNAP_JS)
    a, b = 61_234, 61_273  # 40 steps: the API answers every raw point
    page.evaluate(f"() => Obs.zoomTo({a}, {b})")
    page.wait_for_function("() => !!window.__obsZoom", timeout=30_000)
    zoom, snap = page.evaluate("() => [window.__obsZoom, window.__snap]")

    shown = {c["metric"]: c for c in snap if c["drawn"] and c["visible"]}
    assert set(SERIES) <= set(shown), "the seeded series' charts are in view"
    assert set(shown) <= set(zoom["charts"]), "every chart in view reported its redraw"
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

    # Its figure says the same: the window's data and axes, the y axis fitted to it.
    after = {c["metric"]: c for c in page.evaluate("() => window.__snapNow()") if c["drawn"]}
    for name in SERIES:
        stored = web.api(f"/api/runs/noisy/metrics/{name}/?start={a}&end={b}&points=100")
        c = after[name]
        data = [(x, y) for x, y in zip(c["data"]["x"], c["data"]["y"]) if a <= x <= b]
        assert data == list(zip(stored["steps"], stored["values"])), name
        assert c["xrange"] == [a, b]
        lo, hi = min(stored["values"]), max(stored["values"])
        assert c["yrange"][0] < lo and hi < c["yrange"][1] and c["yrange"][1] - c["yrange"][0] < 1.5 * (hi - lo), name

    # A drag-zoom with the mouse (the pointer stays over the chart, hover on): the same, for the chart dragged.
    drag_zoom(page, 0.3, 0.6)
    page.wait_for_function(f"() => window.__obsZoom && "
                           f"document.getElementById('chart-train-loss').layout.xaxis.range[1] < {b}",
                           timeout=30_000)
    zoom, snap = page.evaluate("() => [window.__obsZoom, window.__snap]")
    c = next(c for c in snap if c["metric"] == contract.M_LOSS)
    lo, hi = c["xrange"]
    assert a < lo < hi < b
    stored = web.api(f"/api/runs/noisy/metrics/{contract.M_LOSS}/?start={a}&end={b}&points=100")
    want = [(s, v) for s, v in zip(stored["steps"], stored["values"]) if lo <= s <= hi]
    got = inside(c["vertices"], lo, hi)
    assert [round(x) for x, _ in got] == [s for s, _ in want] and len(want) >= 5
    tol = (c["yrange"][1] - c["yrange"][0]) / c["plotHeight"]
    assert all(abs(y - v) <= tol for (_, y), (_, v) in zip(got, want))
    assert errors == []


def test_a_zoom_rewrites_nothing_it_leaves_unchanged_in_the_charts_legends(noisy_run, web, new_page):
    """A legend a zoom does not change is not written: each written attribute restyles it, and the next chart's
    draw (uPlot sets its canvas font) then recalculates styles at once, a forced recalc per chart per zoom."""
    page = new_page(viewport={"width": 1400, "height": 900})
    errors = page_errors(page)
    page.goto(f"{web.url}/runs/noisy/")
    page.wait_for_function("() => performance.getEntriesByName('obs-charts-drawn').length > 0", timeout=60_000)
    page.evaluate("""() => { window.__writes = [];
      const seen = new MutationObserver((rs) => rs.forEach((r) => window.__writes.push(
        r.target.closest('.chart').dataset.metric + ': ' + r.type + ' ' + (r.attributeName || ''))));
      document.querySelectorAll('#charts .chart .legend').forEach((el) =>
        seen.observe(el, {attributes: true, childList: true, subtree: true}));
      window.__seen = seen; }""")
    for a, b in ((20_000, 60_000), (61_234, 61_273)):
        page.evaluate(f"() => {{ window.__obsZoom = null; Obs.zoomTo({a}, {b}); }}")
        page.wait_for_function("() => !!window.__obsZoom", timeout=30_000)
    zoom = page.evaluate("() => window.__obsZoom")
    writes = page.evaluate("() => [...window.__writes, ...window.__seen.takeRecords().map((r) => r.type)]")
    assert set(SERIES) <= set(zoom["charts"]), "every chart redrew with its window"
    assert writes == [], f"the legends were rewritten unchanged: {writes[:6]}"
    assert errors == []


# Animation frames run so far, and the count when the page had read the zoom's windows (its /windows/ read with
# bounds) and when it marked "obs-zoom-done".
FRAMES_JS = """(() => {
  window.__frames = 0; window.__at = {};
  const raf = window.requestAnimationFrame.bind(window);
  window.requestAnimationFrame = (cb) => raf((t) => { window.__frames++; cb(t); });
  const get = window.fetch.bind(window);
  window.fetch = (url, ...rest) => get(url, ...rest).then((r) => {
    if (!String(url).includes('/windows/?start=')) return r;
    for (const read of ['json', 'arrayBuffer']) { // (the zoom reads its windows packed: format=f64)
      const body = r[read].bind(r);
      r[read] = () => body().then((got) => { window.__at.parsed = window.__frames; return got; });
    }
    return r;
  });
  const mark = performance.mark.bind(performance);
  performance.mark = (name, ...rest) => {
    if (name === 'obs-zoom-done') window.__at.done = window.__frames;
    return mark(name, ...rest);
  };
})();"""


def test_the_charts_draw_the_zoom_in_the_task_its_windows_land_not_a_frame_later(noisy_run, web, new_page):
    page = new_page(viewport={"width": 1400, "height": 900})
    errors = page_errors(page)
    page.add_init_script(FRAMES_JS)
    page.goto(f"{web.url}/runs/noisy/")
    page.wait_for_function("() => performance.getEntriesByName('obs-charts-drawn').length > 0", timeout=60_000)
    for a, b in ((20_000, 60_000), (61_234, 61_273)):
        page.evaluate(f"() => {{ window.__obsZoom = null; window.__at = {{}}; Obs.zoomTo({a}, {b}); }}")
        page.wait_for_function("() => !!window.__obsZoom", timeout=30_000)
        zoom, at = page.evaluate("() => [window.__obsZoom, window.__at]")
        assert set(SERIES) <= set(zoom["charts"]), "every chart in view drew its window"
        assert at["parsed"] == at["done"], f"no animation frame between the windows' arrival and their drawing: {at}"
    assert errors == []


def test_a_chart_below_the_fold_reads_its_window_once_scrolled_into_view(noisy_run, web, new_page):
    """A zoom reads the windows of the charts in view only (one request); a chart below the fold, never drawn yet,
    reads its own once scrolled into view and draws the window's raw points."""
    page = new_page(viewport={"width": 1400, "height": 560})  # the first row of charts only
    errors = page_errors(page)
    reads = []
    page.on("request", lambda r: "/windows/?start=" in r.url and reads.append(parse_qs(urlparse(r.url).query)))
    page.goto(f"{web.url}/runs/noisy/")
    page.wait_for_function("() => performance.getEntriesByName('obs-charts-drawn').length > 0", timeout=60_000)
    below = page.evaluate("() => document.getElementById('chart-grad-norm-total').getBoundingClientRect().top")
    assert below > 560, "the grad-norm chart starts below the fold"
    a, b = 61_234, 61_273
    page.evaluate(f"() => Obs.zoomTo({a}, {b})")
    page.wait_for_function("() => !!window.__obsZoom", timeout=30_000)
    assert [q["series"] for q in reads] == [[f"{contract.M_LOSS},{contract.M_LR}"]], "the charts in view, once"

    page.evaluate("() => document.getElementById('chart-grad-norm-total').scrollIntoView()")
    page.wait_for_function(f"""() => {{ const gd = document.getElementById('chart-grad-norm-total');
      return !!gd.data && gd.layout.xaxis.range[0] === {a} && gd.data[0].x.includes({a + 1}); }}""", timeout=30_000)
    assert [q["series"] for q in reads[1:]] == [["grad/norm/total"]]
    stored = web.api(f"/api/runs/noisy/metrics/grad/norm/total/?start={a}&end={b}&points=100")
    drawn = page.evaluate("() => { const t = document.getElementById('chart-grad-norm-total').data[0];"
                          " return [Array.from(t.x), Array.from(t.y)]; }")
    assert [(x, y) for x, y in zip(*drawn) if a <= x <= b] == list(zip(stored["steps"], stored["values"]))
    assert errors == []


def test_a_zoom_reads_its_windows_packed_and_draws_exactly_what_the_json_api_answers(noisy_run, web, new_page):
    """The zoom's one request asks for the packed answer (format=f64: float64 columns, no float text either way) and
    each chart draws, between the window's bounds, the very points the JSON API answers for that window."""
    page = new_page(viewport={"width": 1400, "height": 900})
    errors = page_errors(page)
    reads = []
    page.on("response", lambda r: "/windows/?start=" in r.url and reads.append((r.url, r.headers["content-type"])))
    page.goto(f"{web.url}/runs/noisy/")
    page.wait_for_function("() => performance.getEntriesByName('obs-charts-drawn').length > 0", timeout=60_000)
    a, b = 20_003, 22_003  # ~2,000 steps: downsampled (min and max of each bucket), 17-digit values
    page.evaluate(f"() => Obs.zoomTo({a}, {b})")
    page.wait_for_function("() => !!window.__obsZoom", timeout=30_000)
    assert len(reads) == 1 and reads[0][1] == "application/octet-stream", reads
    query = parse_qs(urlparse(reads[0][0]).query)
    assert query["format"] == ["f64"]
    names = query["series"][0]
    wins = web.api(f"/api/runs/noisy/windows/?series={names}&start={a}&end={b}&points={query['points'][0]}")
    for name in names.split(","):
        want = wins["windows"][name]
        assert want["bucket_steps"] > 1  # (a downsampled window)
        box = f"#charts .chart[data-metric='{name}'] .plot"
        drawn = page.evaluate(f"() => {{ const t = document.querySelector(\"{box}\").data[0];"
                              " return [Array.from(t.x), Array.from(t.y)]; }")
        assert [(x, y) for x, y in zip(*drawn) if a <= x <= b] == list(zip(want["steps"], want["values"])), name
    assert errors == []
