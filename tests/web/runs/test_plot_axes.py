"""The one line renderer's axes (static/js/plot.js over uPlot), in Chromium as the pages run it: adjacent tick labels
never read the same (each carries the digits its axis's spacing needs), and the x axis's last label is drawn whole,
inside the chart, not cut at its right edge."""

import math

import pytest

from ..servers import ROOT

pytestmark = [pytest.mark.browser]


@pytest.fixture
def plot(new_page):
    page = new_page(viewport={"width": 900, "height": 600})
    page.set_content("<!doctype html><title>plot</title><div id='c' style='width:900px;height:260px'></div>")
    page.add_style_tag(path=str(ROOT / "static" / "vendor" / "uPlot.min.css"))
    page.add_script_tag(path=str(ROOT / "static" / "vendor" / "uPlot.iife.min.js"))
    page.add_script_tag(path=str(ROOT / "static" / "js" / "plot.js"))
    page.add_script_tag(path=str(ROOT / "static" / "js" / "plotmarks.js"))
    return page


def test_adjacent_tick_labels_are_distinct_with_the_digits_their_spacing_needs(plot):
    got = plot.evaluate("""() => {
      const axis = (lo, hi, step) => { const v = []; for (let x = lo; x <= hi + step / 2; x += step) v.push(x);
                                       return Obs.tickLabels(v); };
      return {zoomed: axis(100000, 150000, 5000), run: axis(0, 1000000, 100000), lr: axis(0, 3e-4, 1e-4),
              loss: axis(0.6, 0.9, 0.05), fine: axis(1000.5, 1000.6, 0.02), big: axis(950000, 1050000, 10000),
              neg: axis(-0.2, 0.2, 0.1), steps: axis(0, 15, 2.5), zoomed25: axis(100000, 110000, 2500)};
    }""")
    assert got["zoomed"] == ["1e5", "1.05e5", "1.1e5", "1.15e5", "1.2e5", "1.25e5", "1.3e5", "1.35e5", "1.4e5",
                             "1.45e5", "1.5e5"]
    assert got["run"] == ["0", "1e5", "2e5", "3e5", "4e5", "5e5", "6e5", "7e5", "8e5", "9e5", "1e6"]
    assert got["lr"] == ["0", "1e\u22124", "2e\u22124", "3e\u22124"]
    assert got["loss"] == ["0.6", "0.65", "0.7", "0.75", "0.8", "0.85", "0.9"]
    assert got["neg"] == ["\u22120.2", "\u22120.1", "0", "0.1", "0.2"]
    # 2.5 apart (uPlot's 1, 2, 2.5, 5 spacings): the tick at 2.5 read "3" and the one at 7.5 "8" (an embed's x axis)
    assert got["steps"] == ["0", "2.5", "5", "7.5", "10", "12.5", "15"]
    assert got["zoomed25"] == ["1e5", "1.025e5", "1.05e5", "1.075e5", "1.1e5"]
    for name, labels in got.items():
        assert all(a != b for a, b in zip(labels, labels[1:])), (name, labels)


def test_the_last_x_label_of_a_zoomed_chart_is_drawn_inside_it(plot):
    got = plot.evaluate("""async () => {
      const node = document.getElementById('c'), x = [], y = [];
      for (let s = 100000; s <= 150000; s += 100) { x.push(s); y.push(2 + Math.sin(s / 1000)); }
      const u = Obs.drawFigure(node, [{x, y, mode: 'lines', name: 'loss', line: {color: '#1f5fbf'}}],
        {margin: {l: 52, r: 10, t: 10, b: 22}, xaxis: {autorange: false, range: [100000, 150000]}, yaxis: {},
         dragmode: false});
      await new Promise((r) => requestAnimationFrame(() => r()));  // (uPlot draws in a microtask)
      const labels = node._figure.ticks.x, dpr = devicePixelRatio || 1;
      const c = document.createElement('canvas').getContext('2d'); c.font = '11px system-ui, sans-serif';
      const last = labels[labels.length - 1], lastX = u.valToPos(150000, 'x') + u.bbox.left / dpr;
      return {labels, right: lastX + c.measureText(last).width / 2, width: u.width};
    }""")
    labels = got["labels"]
    assert labels[-1] == "1.5e5" and len(set(labels)) == len(labels), labels
    assert got["right"] <= got["width"], got  # the last label's right end inside the chart's canvas


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("level", [1.0, 1e-3, 5e4])
def test_a_line_flat_within_rounding_error_draws_on_a_padded_axis(plot, level, log):
    """A constant series smoothed (the page's ?smooth=) comes out a few ulps apart: uPlot's tick search on a span that
    thin never moved past its first tick (pushing until "RangeError: Invalid array length", seconds of a blocked
    page). It draws as a flat line, on an axis padded around it, at any level and on a log axis."""
    got = plot.evaluate("""async ([level, log]) => {
      const node = document.getElementById('c'), x = [], y = [], errors = [];
      // values as the page's smoothing gave them for a constant 1.0: 0.9999999999999997 .. 1.0000000000000002
      const near = [level, level * (1 - 3.3e-16), level * (1 + 2.2e-16)];
      for (let s = 0; s < 60; s++) { x.push(s); y.push(near[s % 3]); }
      const spread = Math.max(...y) - Math.min(...y);
      const onError = (e) => errors.push(String(e.message));
      window.addEventListener('error', onError);  // (uPlot draws in a microtask: its errors are uncaught ones)
      try {
        Obs.drawFigure(node, [{x, y, mode: 'lines', name: 'lr', line: {color: '#1f5fbf'}}],
          {margin: {l: 52, r: 10, t: 10, b: 22}, xaxis: {autorange: false, range: [0, 59]},
           yaxis: {type: log ? 'log' : 'linear'}, dragmode: false});
        await new Promise((r) => requestAnimationFrame(() => r()));
      } catch (e) { errors.push(String(e)); } finally { window.removeEventListener('error', onError); }
      const s = node._figure.u.scales.y;
      return {spread, errors, min: s.min, max: s.max};
    }""", [level, log])
    assert got["spread"] > 0, "the case needs values a few ulps apart"
    assert not got["errors"], got["errors"]
    assert got["min"] < level * 0.99 and got["max"] > level * 1.01, got  # padded around the line, not ulps wide


def test_a_wall_time_axis_ticks_whole_minutes_labelled_in_utc_whatever_the_viewers_zone(new_page):
    """The dashboard's x = wall time (UTC) is unix ms interpolated between heartbeats, so fractional: uPlot's own
    date (Math.round of the ms) put every tick 1 ms before the minute, labelled with the minute before (a chart whose
    hover read 11:32:15 had it under the tick "11:31"); and it labelled the ticks in the viewer's zone."""
    page = new_page(viewport={"width": 900, "height": 600}, timezone_id="America/New_York")
    page.set_content("<!doctype html><title>plot</title><div id='c' style='width:900px;height:260px'></div>")
    page.add_script_tag(path=str(ROOT / "static" / "vendor" / "uPlot.iife.min.js"))
    page.add_script_tag(path=str(ROOT / "static" / "js" / "plot.js"))
    page.add_script_tag(path=str(ROOT / "static" / "js" / "plotmarks.js"))
    got = page.evaluate("""async () => {
      const node = document.getElementById('c'), x = [], y = [];
      const t0 = Date.UTC(2026, 11, 7, 11, 27, 48) + 288.6;  // 11:27:48.2886 UTC
      for (let s = 0; s < 400; s++) { x.push(t0 + s * 1543.37); y.push(9 - s / 100); }
      const u = Obs.drawFigure(node, [{x, y, mode: 'lines', name: 'loss', line: {color: '#1f5fbf'}}],
        {margin: {l: 52, r: 10, t: 10, b: 40}, xaxis: {type: 'date'}, yaxis: {}, dragmode: false});
      await new Promise((r) => requestAnimationFrame(() => r()));
      const a = u.axes[0];  // (uPlot 1.6.32's drawn splits and labels)
      return {splits: a._splits.map((v) => new Date(v).toISOString()), labels: a._values};
    }""")
    assert got["splits"][0] == "2026-12-07T11:28:00.000Z", got
    assert all(s.endswith(":00.000Z") for s in got["splits"]), got  # whole minutes (the span is ~10 minutes)
    assert got["labels"][0].startswith("11:28"), got  # UTC, not New York's 6:28
    assert got["labels"][-1].startswith("11:38"), got  # the last x: 11:38:05


@pytest.mark.parametrize("lo,hi", [(150.0, 2000.0), (0.055, 0.22), (0.7, 3.1), (2e-5, 3e-2)])
def test_a_log_axis_ticks_round_values_labelled_alike(plot, lo, hi):
    """A log y axis (the dashboard's "log y"): its padded range started uPlot's ticks at the data's minimum, so a
    throughput chart read 140.8, 241, 541, 1041, 2082 and a token-drop one 0.05029, 0.07, 1e−1, 0.2; a power of ten
    amid plain numbers read 1e0 beside 2 and 3. Ticks are on round values, and under two decades each label is a
    plain number (wider spans label the powers of ten alone, 1e−3)."""
    got = plot.evaluate("""async ([lo, hi]) => {
      const node = document.getElementById('c'), x = [], y = [];
      for (let s = 0; s <= 300; s++) { x.push(s); y.push(lo * (hi / lo) ** ((Math.sin(s / 7) + 1) / 2)); }
      const u = Obs.drawFigure(node, [{x, y, mode: 'lines', name: 'v', line: {color: '#1f5fbf'}}],
        {margin: {l: 52, r: 10, t: 10, b: 22}, xaxis: {}, yaxis: {type: 'log'}, dragmode: false});
      await new Promise((r) => requestAnimationFrame(() => r()));
      const a = u.axes[1];  // (uPlot 1.6.32's drawn splits and labels)
      return {splits: a._splits, labels: a._values};
    }""", [lo, hi])
    shown = [(v, s) for v, s in zip(got["splits"], got["labels"]) if s]
    assert len(shown) >= 2, got
    for v, s in shown:
        lead = v / 10 ** math.floor(math.log10(v) + 1e-9)
        assert abs(lead - round(lead)) < 1e-6, (v, s, got)  # 100, 200, 500, 0.05 — not 140.8 or 0.05029
        if math.log10(hi / lo) < 1.9:
            assert "e" not in s and float(s.replace("\u2212", "-")) == pytest.approx(v, rel=1e-9), (v, s, got)


def test_a_tap_on_a_chart_without_drag_zoom_reaches_the_page(new_page):
    """On a touch screen a chart has no drag-zoom (dragmode false: uPlot never sees the mousedown), and uPlot then
    took every click for the end of a drag and stopped it: a member's tap on a point never opened the annotation
    form the page's hint promises ("Tap a point on a chart, or use Annotate, to add a note")."""
    page = new_page(viewport={"width": 390, "height": 600}, has_touch=True, is_mobile=True)
    page.set_content("<!doctype html><title>plot</title><div id='c' style='width:360px;height:260px'></div>")
    page.add_script_tag(path=str(ROOT / "static" / "vendor" / "uPlot.iife.min.js"))
    page.add_script_tag(path=str(ROOT / "static" / "js" / "plot.js"))
    page.add_script_tag(path=str(ROOT / "static" / "js" / "plotmarks.js"))
    box = page.evaluate("""async () => {
      const node = document.getElementById('c'), x = [], y = [];
      for (let s = 0; s <= 100; s++) { x.push(s); y.push(9 - s / 50); }
      window.clicked = [];
      node.addEventListener('obs-plot-click', (ev) => window.clicked.push(ev.detail.x));
      const u = Obs.drawFigure(node, [{x, y, mode: 'lines', name: 'loss', line: {color: '#1f5fbf'}}],
        {margin: {l: 40, r: 10, t: 10, b: 22}, xaxis: {}, yaxis: {}, dragmode: false});
      await new Promise((r) => requestAnimationFrame(() => r()));
      const r = u.over.getBoundingClientRect();
      return {x: r.left + r.width / 2, y: r.top + r.height / 2};
    }""")
    page.touchscreen.tap(box["x"], box["y"])
    page.wait_for_function("() => window.clicked.length > 0", timeout=5000)
    assert 40 < page.evaluate("window.clicked[0]") < 60  # the step under the finger (the middle of 0..100)


@pytest.mark.parametrize("lines", ["none", "nulls"])
def test_a_log_axis_with_nothing_to_draw_draws_empty(plot, lines):
    """A chart the run has no data for yet, on a log y axis (the URL's ?chart=X&log=X): its range fell back to [0, 1],
    and uPlot's log ticks from 0 never end ("RangeError: Invalid array length" on every redraw, a blocked page). It
    draws an empty linear axis until a value > 0 arrives."""
    got = plot.evaluate("""async (lines) => {
      const node = document.getElementById('c'), errors = [];
      const traces = lines === 'none' ? [] : [{x: [1, 2, 3], y: [null, null, null], mode: 'lines', name: 'v'}];
      const onError = (e) => errors.push(String(e.message));
      window.addEventListener('error', onError);  // (uPlot draws in a microtask: its errors are uncaught ones)
      try {
        Obs.drawFigure(node, traces, {margin: {l: 52, r: 10, t: 10, b: 22}, xaxis: {}, yaxis: {type: 'log'},
                                      dragmode: false});
        await new Promise((r) => requestAnimationFrame(() => r()));
        const empty = node._figure.u.scales.y.distr;
        // then the run's first values: the same chart on a log axis
        const u = Obs.drawFigure(node, [{x: [1, 2, 3], y: [0.5, 0.2, 0.1], mode: 'lines', name: 'v'}],
                                 node.layout);
        await new Promise((r) => requestAnimationFrame(() => r()));
        return {errors, empty, later: u.scales.y.distr, min: u.scales.y.min};
      } catch (e) { errors.push(String(e)); return {errors}; } finally { window.removeEventListener('error', onError); }
    }""", lines)
    assert not got["errors"], got["errors"]
    assert got["empty"] == 1 and got["later"] == 3 and got["min"] > 0, got  # (distr 3: uPlot's log scale)


@pytest.mark.parametrize("width", [900, 360])
@pytest.mark.parametrize("lo,hi", [(0, 49), (0, 1_000_000), (1024, 51_200), (12_000, 12_300)])
def test_a_log_x_axis_labels_round_ticks_from_its_first_x_above_0(new_page, width, lo, hi):
    """Compare's "log x": steps from 0 started the axis at 1e-9 (ten empty decades; at a phone's width uPlot's log
    filter left every tick unlabelled), tokens from 1,024 ticked 1024, 2024, 3024, and a zoom inside one decade had
    no tick at all. The axis starts at the first x > 0 and labels at least two round ticks, none twice."""
    page = new_page(viewport={"width": width + 40, "height": 600})
    page.set_content(f"<!doctype html><div id='c' style='width:{width}px;height:260px'></div>")
    page.add_script_tag(path=str(ROOT / "static" / "vendor" / "uPlot.iife.min.js"))
    page.add_script_tag(path=str(ROOT / "static" / "js" / "plot.js"))
    page.add_script_tag(path=str(ROOT / "static" / "js" / "plotmarks.js"))
    got = page.evaluate("""async ([lo, hi]) => {
      const node = document.getElementById('c'), x = [], y = [];
      for (let i = 0; i <= 300; i++) { x.push(lo + (hi - lo) * i / 300); y.push(3 - i / 300); }
      const u = Obs.drawFigure(node, [{x, y, mode: 'lines', name: 'v', line: {color: '#1f5fbf'}}],
        {margin: {l: 52, r: 10, t: 10, b: 22}, xaxis: {type: 'log'}, yaxis: {}, dragmode: false});
      await new Promise((r) => requestAnimationFrame(() => r()));
      return {min: u.scales.x.min, max: u.scales.x.max, first: x.find((v) => v > 0), splits: u.axes[0]._splits,
              labels: u.axes[0]._values};
    }""", [lo, hi])
    assert got["min"] == got["first"] and got["max"] == hi, got
    shown = [(v, s) for v, s in zip(got["splits"], got["labels"]) if s]
    assert len(shown) >= 2 and len({s for _, s in shown}) == len(shown), got
    for v, s in shown:
        assert got["min"] <= v <= got["max"] and float(s.replace("\u2212", "-")) == pytest.approx(v), (v, s, got)
        assert float(f"{v:.3g}") == v, (v, got)  # round: 1e4, 2000, 1.21e4 — not 1024 or 2024
    if math.log10(hi / got["first"]) >= 2:
        assert all(math.log10(v) == round(math.log10(v)) for v, _ in shown), got  # the powers of ten alone
