"""The charts' data model (static/js/chartmodel.js), run in Chromium as the pages run it: M4-style min/max per pixel
bucket keeps every bucket's extremes (a one-step spike survives), a zoomed window's finer points merge into the
coarse history, live points append to typed arrays that grow by doubling (no allocation a point) and a rewind cuts
them, and close labels fold into one with a count."""

import math

import pytest

from ..servers import ROOT

pytestmark = [pytest.mark.browser]


@pytest.fixture
def model(new_page):
    page = new_page()
    page.set_content("<!doctype html><title>model</title>")
    page.add_script_tag(path=str(ROOT / "static" / "js" / "chartmodel.js"))
    return page


def test_minmax_keeps_each_buckets_min_and_max_in_x_order(model):
    got = model.evaluate("""() => {
      const x = [], y = [];
      let seed = 7; const rnd = () => (seed = (seed * 16807) % 2147483647) / 2147483647;
      for (let i = 0; i < 10000; i++) { x.push(i); y.push(i === 7777 ? 50 : rnd()); }
      const [X, Y] = Obs.minmax(x, y, 100), w = 9999 / 100, want = new Map();
      for (let i = 0; i < x.length; i++) {
        const b = Math.floor(x[i] / w), m = want.get(b) || {lo: Infinity, hi: -Infinity};
        m.lo = Math.min(m.lo, y[i]); m.hi = Math.max(m.hi, y[i]); want.set(b, m);
      }
      const have = new Map();
      X.forEach((v, i) => { const b = Math.floor(v / w), m = have.get(b) || {lo: Infinity, hi: -Infinity};
                            m.lo = Math.min(m.lo, Y[i]); m.hi = Math.max(m.hi, Y[i]); have.set(b, m); });
      return {n: X.length, sorted: X.every((v, i) => i === 0 || v > X[i - 1]),
              same: [...want].every(([b, m]) => have.get(b).lo === m.lo && have.get(b).hi === m.hi),
              spike: X.includes(7777) && Y[X.indexOf(7777)] === 50, pairs: X.every((v, i) => y[v] === Y[i])};
    }""")
    assert got["n"] <= 2 * 101 and got["sorted"] and got["same"] and got["spike"] and got["pairs"], got


def test_a_zoomed_window_merges_into_the_coarse_history(model):
    got = model.evaluate("""() => {
      const a = {steps: [], values: [], nfSteps: [300, 550, 900], nfKinds: ["nan", "inf", "nan"]};
      for (let s = 0; s <= 1000; s += 10) { a.steps.push(s); a.values.push(s / 10); }
      const b = {steps: [], values: [], nfSteps: [555], nfKinds: ["-inf"]};
      for (let s = 500; s <= 600; s++) { b.steps.push(s); b.values.push(-s); }
      const m = Obs.mergeWindow(a, b, 500, 600);
      return {before: m.steps.filter((s) => s < 500).length, inside: m.steps.filter((s) => s >= 500 && s <= 600),
              after: m.steps.filter((s) => s > 600).length, values: m.values.slice(50, 53),
              sorted: m.steps.every((s, i) => i === 0 || s > m.steps[i - 1]), nf: m.nfSteps, kinds: m.nfKinds,
              untouched: a.steps.length === 101};
    }""")
    assert got["before"] == 50 and got["after"] == 40 and got["inside"] == list(range(500, 601))
    assert got["values"] == [-500, -501, -502] and got["sorted"] and got["untouched"]
    assert got["nf"] == [300, 555, 900] and got["kinds"] == ["nan", "-inf", "nan"]


def test_live_points_append_to_doubling_typed_arrays_and_a_rewind_cuts_them(model):
    got = model.evaluate("""() => {
      const b = new Obs.LiveBuffer(1024), sizes = new Set();
      for (let i = 0; i < 3000; i++) { b.push(i, i * 2); sizes.add(b.x.length); }
      const [x, y] = b.view();
      const out = {n: x.length, last: [x[2999], y[2999]], sizes: [...sizes], typed: x instanceof Float64Array,
                   shared: x.buffer === b.x.buffer};
      b.cutAfter(1500);
      out.cut = b.view()[0].length; out.cutLast = b.view()[0][1500];
      const d = {steps: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9], values: [9, 8, 7, 6, 5, 4, 3, 2, 1, 0],
                 nfSteps: [3, 8], nfKinds: ["nan", "inf"]};
      Obs.cutAfter(d, 5);
      out.rewound = d;
      return out;
    }""")
    assert got["n"] == 3000 and got["last"] == [2999, 5998] and got["typed"] and got["shared"]
    assert got["sizes"] == [1024, 2048, 4096], "the arrays double: no allocation a point"
    assert got["cut"] == 1501 and got["cutLast"] == 1500
    assert got["rewound"] == {"steps": [0, 1, 2, 3, 4, 5], "values": [9, 8, 7, 6, 5, 4], "nfSteps": [3],
                              "nfKinds": ["nan"]}


def test_a_drawn_line_loads_into_the_buffer_and_live_points_append_into_the_same_memory(model):
    """The live append path (chartlive.js): a full redraw loads the drawn line (memory reused unless it must grow);
    live points then append into those arrays, and the views handed to the renderer see them."""
    got = model.evaluate("""() => {
      const b = new Obs.LiveBuffer(1024), x = [], y = [];
      for (let i = 0; i < 1500; i++) { x.push(i * 10); y.push(i % 7); }
      b.load(x, y);
      const grown = b.x.length, mem = b.x.buffer;
      b.load(x.slice(0, 100), y.slice(0, 100)); // a shorter line (a rewind's full redraw): the same memory
      const reused = b.x.buffer === mem && b.n === 100;
      for (let i = 100; i < 2000; i++) b.push(i * 10, -i);
      const [vx, vy] = b.view();
      b.push(20000, 42);
      const [wx, wy] = b.view();
      return {grown, reused, n: vx.length, first: [vx[0], vy[0]], joined: [vx[100], vy[100]],
              last: [vx[1999], vy[1999]], same: vx.buffer === b.x.buffer && wx.buffer === vx.buffer,
              pushed: [wx.length, wx[2000], wy[2000]], sorted: wx.every((v, i) => i === 0 || v > wx[i - 1])};
    }""")
    assert got["grown"] == 2048 and got["reused"], got
    assert got["n"] == 2000 and got["first"] == [0, 0] and got["joined"] == [1000, -100]
    assert got["last"] == [19990, -1999] and got["same"], "appended in place, the views share the buffer"
    assert got["pushed"] == [2001, 20000, 42] and got["sorted"]


def test_close_labels_fold_into_one_with_a_count_and_every_text_on_hover(model):
    got = model.evaluate("""() => {
      const marks = [{id: "a", x0: 0, label: "loss spike at 0"}, {id: "b", x0: 5, label: "grad norm jump"},
                     {id: "c", x0: 9, label: "lr changed"}, {id: "d", x0: 300, label: "far away"},
                     {id: "e", x0: 100, label: "centred", anchor: "center"}];
      const groups = Obs.labelGroups(marks, (s) => s * 2, 5.6);
      return {ids: groups.map((g) => g.map((o) => o.id)), labels: groups.map(Obs.groupLabel),
              hover: Obs.groupHover(groups[0])};
    }""")
    assert got["ids"] == [["a", "b", "c"], ["e"], ["d"]]
    assert got["labels"] == ["loss spike at… +2", "centred", "far away"]
    assert got["hover"] == "loss spike at 0<br>grad norm jump<br>lr changed"


def test_the_smoothed_line_is_debiased_so_its_first_points_are_not_dragged_towards_zero(model):
    got = model.evaluate("() => [Obs.ema([4, 4, 4], 0.9), Obs.ema([1, 3], 0.5), Obs.ema([], 0.9)]")
    flat, pair, empty = got
    assert all(abs(v - 4) < 1e-12 for v in flat), "a constant stays at its value from the first point"
    # by hand: last = 0.5, 0.5 / (1 - 0.5) = 1; then last = 0.25 + 1.5 = 1.75, 1.75 / (1 - 0.25) = 7 / 3
    assert abs(pair[0] - 1) < 1e-12 and abs(pair[1] - 7 / 3) < 1e-12 and empty == []


def test_a_figures_x_extent_spans_its_lines_only(model):
    """Obs.xExtent (a live chart's headroom, the marks' pixel scale, a compare chart's duration ticks): the first and
    last x over every line, typed-array lines included; point marks and empty lines do not count."""
    got = model.evaluate("""() => [
      Obs.xExtent([{mode: "lines", x: [5, 9, 20]}, {mode: "markers", x: [1, 500]},
                   {mode: "lines", x: new Float64Array([2, 3, 4]).subarray(0, 2)}, {mode: "lines", x: []}]),
      Obs.xExtent([{mode: "markers", x: [1]}]), Obs.xExtent(null)]""")
    assert got[0] == [2, 20]
    assert got[1] == got[2] == [math.inf, -math.inf], "no line has a point: an empty span"
