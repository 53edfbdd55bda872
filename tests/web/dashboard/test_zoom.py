"""Real zoom on a long run: a drag-zoom and the step fields read finer data from the API, down to every raw step
of a 20-step window (a one-step spike in it included, values as the API gives them); the URL holds the view and
reproduces it; zooming back out still shows the spike."""

import math
from urllib.parse import parse_qs, urlparse

import pytest

from observatory import contract

from ..servers import page_errors
from .conftest import drag_zoom, plot_box, seed_series

pytestmark = [pytest.mark.browser, pytest.mark.slow]

STEPS, SPIKE, SPIKE_VALUE = 200_000, 123_457, 30.0
LOSS = "chart-train-loss"
TRACE = """() => { const d = document.getElementById('chart-train-loss');
  return d && d.data && d.data[0] ? {x: Array.from(d.data[0].x), y: Array.from(d.data[0].y),
    range: d.layout.xaxis.range, auto: d.layout.xaxis.autorange, yrange: d.layout.yaxis.range} : null; }"""


def loss(step: int) -> float:
    return SPIKE_VALUE if step == SPIKE else 3.0 + 0.25 * math.sin(step / 50.0)


@pytest.fixture
def long_run(live_env):
    from webapp.runs.models import Run

    run = Run.objects.create(id="long", name="long run", state="training", last_step=STEPS - 1)
    seed_series(run, contract.M_LOSS, ((s, loss(s)) for s in range(STEPS)))
    seed_series(run, contract.M_LR, ((s, 1e-3) for s in range(STEPS)))
    return run


def window(trace, lo, hi):
    return [(x, y) for x, y in zip(trace["x"], trace["y"]) if lo <= x <= hi]


def test_zoom_reads_every_raw_step_of_a_20_step_window_and_the_spike_survives_zooming_out(long_run, web, new_page):
    page = new_page(viewport={"width": 1400, "height": 900})
    errors = page_errors(page)
    api = []
    page.on("request", lambda r: "/api/" in r.url and api.append(urlparse(r.url)))
    page.goto(f"{web.url}/runs/long/")
    page.wait_for_function(f"() => {{ const t = ({TRACE})(); return t && t.x.length > 100; }}", timeout=30_000)
    full = page.evaluate(TRACE)
    # the page came with the run, its metric list and the default charts' whole-run windows: none read again
    assert not [u.path for u in api if u.path.rstrip("/").endswith(("/runs/long", "/metrics", "/train/loss",
                                                                        "/optim/learning_rate"))]
    assert len(full["x"]) < 5000, "the whole run is drawn downsampled"
    assert (SPIKE, SPIKE_VALUE) in window(full, SPIKE, SPIKE), "the one-step spike is kept at full zoom"

    # A real drag-zoom over part of the chart: the view (and the URL) take the range, finer data comes in.
    drag_zoom(page, 0.55, 0.70)
    page.wait_for_function("() => new URLSearchParams(location.search).has('from')", timeout=10_000)
    q = parse_qs(urlparse(page.url).query)
    lo, hi = int(q["from"][0]), int(q["to"][0])
    assert 0.5 * STEPS < lo < hi < 0.75 * STEPS
    page.wait_for_function(f"() => {{ const t = ({TRACE})(); return t && t.x.filter((x) => x >= {lo} && x <= {hi})"
                           f".length > {len(window(full, lo, hi)) * 2}; }}", timeout=30_000)

    # Keyboard: the step fields zoom to a 20-step window around the spike; every raw step is drawn.
    a, b = SPIKE - 10, SPIKE + 9
    page.fill("#range-from", str(a))
    page.fill("#range-to", str(b))
    page.press("#range-to", "Enter")
    page.wait_for_function(f"() => {{ const t = ({TRACE})(); return t && t.x.filter((x) => x >= {a} && x <= {b})"
                           f".length === 20; }}", timeout=30_000)
    # that zoom read both charts' series in one request
    reads = [parse_qs(u.query) for u in api if u.path.endswith("/windows/") and parse_qs(u.query)["start"] == [str(a)]]
    assert len(reads) == 1 and set(reads[0]["series"][0].split(",")) == {contract.M_LOSS, contract.M_LR}
    zoomed = page.evaluate(TRACE)
    stored = web.api(f"/api/runs/long/metrics/{contract.M_LOSS}/?start={a}&end={b}&points=100")
    assert stored["exact"] and stored["steps"] == list(range(a, b + 1))
    assert window(zoomed, a, b) == list(zip(stored["steps"], stored["values"])), "the chart draws what the API stores"
    assert (SPIKE, SPIKE_VALUE) in window(zoomed, a, b)
    assert zoomed["range"] == [a, b]
    assert zoomed["yrange"][0] < 2.8 and SPIKE_VALUE < zoomed["yrange"][1] < 1.2 * SPIKE_VALUE, \
        "the y axis fits the visible window"
    q = parse_qs(urlparse(page.url).query)
    assert (q["from"], q["to"]) == ([str(a)], [str(b)]) and contract.M_LOSS in q["chart"]

    # The URL is the view: opened elsewhere, it shows the same window, every raw step in it.
    other = new_page(viewport={"width": 1400, "height": 900})
    other.goto(page.url)
    other.wait_for_function(f"() => {{ const t = ({TRACE})(); return t && t.x.filter((x) => x >= {a} && x <= {b})"
                            f".length === 20; }}", timeout=30_000)
    assert other.evaluate(TRACE)["range"] == [a, b]

    # Zooming back out: the whole run again, downsampled, the spike still there.
    page.click("#range-reset")
    page.wait_for_function(f"() => {{ const t = ({TRACE})(); return t && t.auto === true && "
                           f"t.x.filter((x) => x >= {a} && x <= {b}).length < 20; }}", timeout=30_000)
    out = page.evaluate(TRACE)
    assert (SPIKE, SPIKE_VALUE) in window(out, SPIKE, SPIKE)
    page.wait_for_function("() => !new URLSearchParams(location.search).has('from')")  # (the URL follows: view.js)
    # Double-click (Plotly's reset) on the other page zooms out the same way.
    box = plot_box(other)
    other.mouse.dblclick(box["x"] + box["w"] / 2, box["y"] + box["h"] / 2)
    other.wait_for_function(f"() => {{ const t = ({TRACE})(); return t && t.auto === true; }}", timeout=30_000)
    assert (SPIKE, SPIKE_VALUE) in window(other.evaluate(TRACE), SPIKE, SPIKE)
    assert errors == []


def test_a_zoom_writes_the_url_after_its_charts_are_drawn(long_run, web, new_page):
    """history.replaceState (~5-25 ms of main thread on a busy box) waits for the zoom's redraw: it cannot hold up
    the windows' answer being drawn; the URL still follows."""
    page = new_page(viewport={"width": 1400, "height": 900})
    page.add_init_script("""(() => { const put = history.replaceState.bind(history); window.__urlAt = [];
      history.replaceState = (...a) => { window.__urlAt.push(performance.now()); return put(...a); }; })()""")
    page.goto(f"{web.url}/runs/long/")
    page.wait_for_function("() => performance.getEntriesByName('obs-first-paint').length > 0", timeout=30_000)
    page.evaluate("() => { window.__urlAt = []; Obs.zoomTo(100000, 101000); }")
    page.wait_for_function("() => !!window.__obsZoom && window.__urlAt.length > 0 && "
                           "new URLSearchParams(location.search).get('from') === '100000'", timeout=30_000)
    saved, drawn = page.evaluate("""() => [window.__urlAt[0],
        performance.getEntriesByName('obs-zoom-done').pop().startTime]""")
    assert saved >= drawn, f"the URL was written {drawn - saved:.1f} ms before the zoom's charts were drawn"
