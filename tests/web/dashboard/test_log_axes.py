"""Log axes as the pages draw them (compare's "log x", a chart's "log y"; static/js/plot.js over uPlot): the Training
loss chart on a log step axis showed no x tick label at all (step 0 put its range's start at 1e-9, ten empty decades
whose ticks uPlot's log filter left unlabelled), and a tokens axis from 1,024 ticked 1024, 2024, 3024 (uPlot counts
a log axis's ticks up from its range's start). Every log axis shows at least two labelled ticks, on the axis's powers
of ten (or 1, 2, 5 × 10^k when fewer than two powers are in range), inside the range drawn, no label twice."""

import math

import pytest

from observatory import contract as c

from ..servers import page_errors
from .test_a11y import shot
from .test_compare import RESUMED, RUNG, runs  # noqa: F401 (the compared runs' fixture)

pytestmark = [pytest.mark.browser, pytest.mark.slow]
AXES = """(id) => { const d = document.getElementById(id), u = d && d._figure && d._figure.u;
  if (!u || !u.axes[0]._splits || !(d.data || []).length) return null;
  const xs = d.data.filter((t) => t.mode === 'lines').flatMap((t) => Array.from(t.x).filter((v) => v > 0));
  return {types: [d.layout.xaxis.type, d.layout.yaxis.type], first: Math.min(...xs),
          axes: [0, 1].map((i) => ({min: u.scales[u.axes[i].scale].min, max: u.scales[u.axes[i].scale].max,
                                    splits: u.axes[i]._splits, labels: u.axes[i]._values}))}; }"""


def check_log_axis(axis):
    shown = [(v, s) for v, s in zip(axis["splits"], axis["labels"]) if s]
    assert len(shown) >= 2, axis
    assert len({s for _, s in shown}) == len(shown), axis  # no label twice
    lo, hi = axis["min"], axis["max"]
    assert lo > 0 and hi / lo > 1.5, axis  # (not ten decades down to 1e-9 for a step 0)
    leads = set()
    for v, s in shown:
        assert lo * (1 - 1e-9) <= v <= hi * (1 + 1e-9), (v, s, axis)  # inside the plotted range
        k = math.floor(math.log10(v) + 1e-9)
        lead = v / 10 ** k
        assert abs(lead - round(lead)) < 1e-9, (v, s, axis)  # 1e4, 2000 — not 1024, 2024
        leads.add(round(lead))
        assert float(s.replace("\u2212", "-")) == pytest.approx(v, rel=1e-9), (v, s, axis)  # the label reads v
    powers = [k for k in range(math.ceil(math.log10(lo) - 1e-9), math.floor(math.log10(hi) + 1e-9) + 1)]
    if len(powers) >= 2:
        assert leads == {1}, axis  # the powers of ten alone
    else:
        assert leads <= {1, 2, 5}, axis
UNITS = {"d": 86400, "h": 3600, "min": 60, "s": 1}


def seconds(label: str) -> float:
    """A duration label's seconds ("1 min 40 s" -> 100); ValueError for anything else (a bare "100")."""
    words = label.split()
    if not words or len(words) % 2 or any(u not in UNITS for u in words[1::2]):
        raise ValueError(f"not a duration: {label!r}")
    return sum(float(n) * UNITS[u] for n, u in zip(words[::2], words[1::2]))


def check_log_duration_axis(axis):
    """A log wall-time axis (QA, issue 46: it read 100, 1000): round durations, each label the time it marks."""
    shown = [(v, s) for v, s in zip(axis["splits"], axis["labels"]) if s]
    assert len(shown) >= 2 and len({s for _, s in shown}) == len(shown), axis
    lo, hi = axis["min"], axis["max"]
    for v, s in shown:
        assert lo * (1 - 1e-9) <= v <= hi * (1 + 1e-9), (v, s, axis)
        assert seconds(s) == pytest.approx(v), (v, s, axis)
    if hi / lo >= 10:  # decades: spread along the log axis, not bunched at its right end
        assert all(b / a >= 2 for (a, _), (b, _) in zip(shown, shown[1:])), axis


@pytest.mark.parametrize("width", [1400, 390])
@pytest.mark.parametrize("x", ["step", "tokens", "time"])
def test_the_compare_pages_log_axes_label_their_ticks(runs, web, new_page, x, width):  # noqa: F811
    page = new_page(viewport={"width": width, "height": 900})
    errors = page_errors(page)
    # wall time: switched to from steps (the chart drawn on a step axis first), as an operator does
    first = "step" if x == "time" else x
    page.goto(web.url + f"/compare/?runs={RESUMED},{RUNG}&chart={c.M_LOSS}&x={first}&logx=1&log={c.M_LOSS}")
    drawn = f"(title) => {{ const a = ({AXES})('chart-train-loss'), d = document.getElementById('chart-train-loss');" \
            " return a && a.types[0] === 'log' && a.types[1] === 'log' && d.layout.xaxis.title.text === title; }"
    title = {"step": "step", "tokens": "tokens trained", "time": "wall time since each run's start"}
    if x == "time":
        page.wait_for_function(drawn, arg=title["step"], timeout=30_000)
        page.click("#x-mode button[value=time]")
    page.wait_for_function(drawn, arg=title[x], timeout=30_000)
    got = page.evaluate(AXES, "chart-train-loss")
    shot(page, f"compare-logx-{x}-{width}.png")
    if x == "time":
        check_log_duration_axis(got["axes"][0])  # x: seconds from each run's start, as durations
        page.fill("#range-from", "20")  # a zoom: the ticks follow the range drawn
        page.fill("#range-to", "80")
        page.click("#range-form button[type=submit]")
        page.wait_for_function(f"() => {{ const a = ({AXES})('chart-train-loss'); "
                               "return a && a.axes[0].max < 100; }", timeout=30_000)
        zoomed = page.evaluate(AXES, "chart-train-loss")["axes"][0]
        check_log_duration_axis(zoomed)
    else:
        check_log_axis(got["axes"][0])  # x: steps from 0 (off the log axis), tokens from 1,024
    assert got["axes"][0]["min"] == pytest.approx(got["first"]), got  # from the first x > 0, not from 1e-9
    check_log_axis(got["axes"][1])  # y: the loss, log
    assert errors == []


@pytest.mark.parametrize("width", [1400, 390])
def test_the_dashboards_log_y_labels_its_ticks(runs, web, new_page, width):  # noqa: F811
    """The dashboard has no log x (its x is step, tokens or wall time, in the URL's x=): its log y, on tokens."""
    page = new_page(viewport={"width": width, "height": 900})
    errors = page_errors(page)
    page.goto(web.url + f"/runs/{RESUMED}/?log={c.M_LOSS}&x=tokens")
    page.wait_for_function(f"() => {{ const a = ({AXES})('chart-train-loss'); return a && a.types[1] === 'log'; }}",
                           timeout=30_000)
    shot(page, f"dashboard-logy-{width}.png")
    check_log_axis(page.evaluate(AXES, "chart-train-loss")["axes"][1])
    assert errors == []
