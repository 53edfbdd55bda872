"""Live points on a chart whose lines sit on different steps: a long run's Training loss chart draws train/loss and the
per-domain losses from downsampled windows, each keeping its buckets' extremes at its own steps (and the per-domain
losses begin later), so the lines do not share their steps. Live points (through ingest as `manage.py ingest` runs
it, over the page's WebSocket) must leave every line drawn, each with finite values at its steps, on a y axis fitted
to them. (Commit 740f284 joined such lines onto one x with NaN gaps in the live buffers: uPlot does not treat NaN as a
gap, took its y range from a first value that was NaN and drew the chart empty on a 0..1 axis; the other browser
tests' runs of a few hundred steps keep every line on every step, and did not show it.)"""

import math

import pytest

from observatory import contract

from ..servers import PAGE_HOOK, SETTLED_JS, page_errors
from .conftest import in_thread, seed_series

pytestmark = [pytest.mark.browser, pytest.mark.slow]

STEPS, LIVE = 5_000, 4  # 5,000 steps a series: each chart window (<= 1,000 points) is downsampled
DOMAIN_FROM = 100  # the per-domain losses begin here (the trainer's first per-domain batch)
CHART = "chart-train-loss"
DOMAINS = ("code", "prose")
NAMES = (contract.M_LOSS, *(contract.domain_loss(d) for d in DOMAINS))


def value(name: str, step: int) -> float:
    """Three curves whose local extremes fall on different steps (periods of 314, 232 and 144 steps)."""
    if name == contract.M_LOSS:
        return 3.0 + 0.25 * math.sin(step / 50.0)
    if name == contract.domain_loss("code"):
        return 3.4 + 0.3 * math.sin(step / 37.0 + 1.0)
    return 2.6 + 0.2 * math.cos(step / 23.0)


# The chart as drawn (plot.js: node.data, node.layout): each line's steps, values (a non-finite one as its text) and
# colour, the y range drawn, and how many of the canvas's pixels have each line's colour (what is painted).
DRAWN = f"""() => {{ const p = document.getElementById('{CHART}'), c = p && p.querySelector('.uplot canvas');
  if (!c || !p.data || !p.layout) return null;
  const lines = p.data.filter((t) => t.mode === 'lines');
  const px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  const rgb = (hex) => [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16));
  const painted = lines.map((t) => {{ const [r, g, b] = rgb(t.line.color); let n = 0;
    for (let i = 0; i < px.length; i += 4) {{
      if (px[i + 3] > 200 && Math.abs(px[i] - r) + Math.abs(px[i + 1] - g) + Math.abs(px[i + 2] - b) < 40) n++;
    }}
    return n; }});
  return {{lines: lines.map((t, k) => ({{name: t.name, x: Array.from(t.x), painted: painted[k],
            y: Array.from(t.y, (v) => (Number.isFinite(v) ? v : String(v)))}})),
          yrange: p.layout.yaxis.range}}; }}"""


@pytest.fixture
def run(live_env, trainer, run_id):
    from webapp.runs.models import Run

    run = Run.objects.create(id=run_id, name="unaligned lines", state="training", last_step=STEPS - 1)
    for name in NAMES:
        first = 0 if name == contract.M_LOSS else DOMAIN_FROM
        seed_series(run, name, ((s, value(name, s)) for s in range(first, STEPS)))
    return run


def test_live_points_keep_every_line_drawn_when_the_lines_sit_on_different_steps(run, trainer, redis_client, web,
                                                                                  new_page):
    from webapp.live.pipeline import IngestProcess

    page = new_page(viewport={"width": 1400, "height": 900})
    page.add_init_script(PAGE_HOOK)
    errors = page_errors(page)
    page.goto(f"{web.url}/runs/{run.id}/")
    page.wait_for_function(f"""() => performance.getEntriesByName('obs-charts-drawn').length > 0 &&
        document.getElementById('stat-conn').textContent === 'live' && ({SETTLED_JS})() &&
        (({DRAWN})() || {{lines: []}}).lines.length === {len(NAMES)}""", timeout=60_000)

    # What the test is about: the series' windows are downsampled, and not onto the same steps.
    windows = page.evaluate("() => JSON.parse(document.getElementById('page-data').textContent).initial_windows")
    steps = {name: windows[name]["steps"] for name in NAMES}
    assert all(0 < len(s) < STEPS - DOMAIN_FROM for s in steps.values()), "every window is downsampled"
    assert len({tuple(s) for s in steps.values()}) == len(NAMES), "each line on steps of its own"

    # Live points for every line, through ingest (what `manage.py ingest` runs) into the run's live log.
    live = range(STEPS, STEPS + LIVE)
    for s in live:
        trainer.metrics_named(s, {name: value(name, s) for name in NAMES})
    ingest = IngestProcess(redis_client, consumer="test-ingest", batch=500, interval=0.0, lease_ms=10_000)
    try:
        assert in_thread(ingest.drain) == LIVE
    finally:
        in_thread(ingest.close)
    last = STEPS + LIVE - 1
    page.wait_for_function(f"() => ({DRAWN})().lines.every((l) => l.x.includes({last}))", timeout=30_000)

    drawn = page.evaluate(DRAWN)
    values = [y for line in drawn["lines"] for y in line["y"] if not isinstance(y, str)]
    lo, hi = min(values), max(values)
    y0, y1 = drawn["yrange"]
    assert y0 <= lo and hi <= y1 and (y1 - y0) < 2 * (hi - lo), \
        f"the y axis drawn, {drawn['yrange']}, fits the lines' values ({lo:.3f}..{hi:.3f})"
    for line in drawn["lines"]:  # (a per-domain line is named by its domain)
        name = contract.domain_loss(line["name"]) if line["name"] in DOMAINS else contract.M_LOSS
        xs, ys = line["x"], line["y"]
        bad = [(x, y) for x, y in zip(xs, ys) if isinstance(y, str)]
        assert not bad, f"{line['name']}: drawn with non-finite values at {len(bad)} steps, e.g. {bad[:3]}"
        assert xs == sorted(set(xs)) and len(xs) > 100, f"{line['name']}: its steps, in order, once each"
        assert all(y == pytest.approx(value(name, x)) for x, y in zip(xs, ys)), f"{line['name']}: its own values"
        assert xs[-LIVE:] == list(live), f"{line['name']}: the live points drawn"
        assert line["painted"] > 200, f"{line['name']}: painted on the canvas ({line['painted']} pixels)"
    assert errors == []
