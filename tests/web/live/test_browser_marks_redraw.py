"""Live points and marks on a live chart, through the one line renderer (static/js/plot.js over uPlot): a live point
is drawn at once (a redraw for live points only, Obs.redrawCounts.append) with nothing added to the page for it; a
change of the marks redraws them with their labels; a live chart keeps room on x for the next points (from the
trainer's heartbeat rate before any live point) and a point past its axis widens it."""

import re

import pytest

from observatory import contract

from ..servers import live_run, page_errors, wait_trace

pytestmark = [pytest.mark.browser, pytest.mark.slow]

LOSS = "chart-train-loss"
COUNTS = "() => ({...Obs.redrawCounts})"
LABELS = (f"() => ((document.getElementById('{LOSS}').layout || {{}}).annotations || [])"
          ".filter((a) => a.visible !== false).map((a) => a.text)")
SHAPES = f"() => ((document.getElementById('{LOSS}').layout || {{}}).shapes || []).map((s) => s.x0)"
HOVERS = f"() => document.getElementById('{LOSS}').layout.annotations.map((a) => a.hovertext)"
ELEMENTS = f"() => document.getElementById('{LOSS}').querySelectorAll('*').length"


def marks(*steps: int) -> str:
    """Marks on the loss chart through the feature modules' overlay API (what anomalies.js and the others call)."""
    items = ", ".join(f"{{id: 'test-{s}', x0: {s}, label: 'mark {s}', metric: '{contract.M_LOSS}'}}" for s in steps)
    return f"() => Obs.setOverlays('test', [{items}])"


def opened(new_page, servers, run_id):
    """The run's dashboard at desktop size, live and every chart in view drawn; (page, its errors as they come)."""
    page = new_page(viewport={"width": 1400, "height": 900})
    errors = page_errors(page)
    page.goto(f"{servers.url}/runs/{run_id}/")
    page.wait_for_function("() => document.getElementById('stat-conn').textContent === 'live' && "
                           "performance.getEntriesByName('obs-charts-drawn').length > 0", timeout=60_000)
    return page, errors


def test_live_points_and_marks_are_drawn_and_a_point_past_the_axis_widens_it(trainer, servers, new_page, run_id):
    step = live_run(trainer, servers, run_id, "live marks")
    page, errors = opened(new_page, servers, run_id)

    page.evaluate(marks(100))
    step(200)
    wait_trace(page, LOSS, "x.includes(200)")
    page.wait_for_function(f"() => ({LABELS})().includes('mark 100')", timeout=30_000)
    x_end = page.evaluate(f"() => document.getElementById('{LOSS}').layout.xaxis.range[1]")
    assert x_end > 200, "a live chart's x axis keeps room for the next points"
    before, elements = page.evaluate(COUNTS), page.evaluate(ELEMENTS)

    # A live point: drawn at once, its redraw one for live points, nothing added to the page for it.
    step(201)
    wait_trace(page, LOSS, "x.includes(201)")
    page.wait_for_function(f"() => Obs.redrawCounts.append > {before['append']}", timeout=30_000)
    assert page.evaluate(ELEMENTS) == elements, "a live point adds no element"
    assert page.evaluate(f"() => document.getElementById('{LOSS}').data[0].x instanceof Float64Array"), \
        "drawn through the live append path (chartlive.js): the line is a view of its typed-array buffer"

    # A second mark and another live point: both drawn, the labels with them.
    page.evaluate(marks(100, 150))
    step(202)
    page.wait_for_function(f"() => ({LABELS})().includes('mark 150')", timeout=30_000)
    wait_trace(page, LOSS, "x.includes(202)")
    assert page.evaluate(SHAPES) == [100, 150]
    assert page.locator(f"#{LOSS} .mark-label:visible", has_text="mark 150").count() == 1, "the new label"
    assert page.locator(f"#{LOSS} .mark-label:visible", has_text="mark 100").count() == 1, "the old one stays"
    label_x = page.evaluate(f"""() => {{ const g = document.getElementById('{LOSS}'), z = Obs.figureBox(g);
        const l = [...g.querySelectorAll('.mark-label')].find((e) => e.textContent === 'mark 150');
        return [l.getBoundingClientRect().left - g.getBoundingClientRect().left - z.left, Obs.figureX(g, 150)]; }}""")
    assert label_x[0] == pytest.approx(label_x[1], abs=1.0), "a label sits at its mark"

    # A point past the x axis's end: the axis widens to show it, the marks still drawn.
    far = int(x_end) + 50
    step(far)
    wait_trace(page, LOSS, f"x.includes({far})")
    page.wait_for_function(f"() => document.getElementById('{LOSS}').layout.xaxis.range[1] > {far}", timeout=30_000)
    assert page.evaluate(SHAPES) == [100, 150] and "mark 150" in page.evaluate(LABELS)
    assert errors == []


def test_many_marks_fold_their_labels_with_every_text_on_hover_and_a_click_zooms(trainer, servers, new_page, run_id):
    step = live_run(trainer, servers, run_id, "many marks")
    page, errors = opened(new_page, servers, run_id)
    lines, bands = list(range(2, 182, 3)), [(10, 14), (100, 110)]  # 60 lines, 2 bands
    items = [f"{{id: 'l{s}', x0: {s}, label: 'mark {s}', collapse: true, metric: '{contract.M_LOSS}'}}" for s in lines]
    items += [f"{{id: 'b{a}', x0: {a}, x1: {b}, metric: '{contract.M_LOSS}'}}" for a, b in bands]
    page.evaluate(f"() => Obs.setOverlays('test', [{', '.join(items)}])")
    step(200)
    page.wait_for_function(f"() => ({SHAPES})().length === 62", timeout=30_000)
    shapes = page.evaluate(f"() => document.getElementById('{LOSS}').layout.shapes.map((s) => s.type)")
    assert shapes.count("rect") == 2 and shapes.count("line") == 60
    labels = page.evaluate(LABELS)
    assert labels and any("+" in t for t in labels), "close labels fold into one with a count"
    folded = page.locator(f"#{LOSS} .mark-label:has-text('+')").first
    folded.hover()
    page.wait_for_selector(f"#{LOSS} .chart-hover:not([hidden])", timeout=10_000)
    assert "mark 2" in page.text_content(f"#{LOSS} .chart-hover")
    folded.click()
    page.wait_for_function("() => document.getElementById('range-to').value !== ''", timeout=30_000)
    frm, to = (int(page.input_value(f"#range-{k}")) for k in ("from", "to"))
    assert frm <= 2 < to < 180, (frm, to)
    assert errors == []


def test_a_training_runs_charts_keep_room_for_live_points_from_the_start(trainer, servers, new_page, run_id):
    """With the trainer's heartbeat giving its rate, a chart is drawn with room on x for the next points before any
    live point came; the first live points are drawn in that room."""
    step = live_run(trainer, servers, run_id, "room ahead")
    trainer.send("heartbeat", phase="training", step=199, tokens=199 * 4096, token_budget=10**9, eta_s=None,
                 steps_per_s=2.0, since_step_s=0.0, pid=1)
    page, errors = opened(new_page, servers, run_id)
    page.wait_for_function(f"() => document.getElementById('{LOSS}').layout.xaxis.range && "
                           f"document.getElementById('{LOSS}').layout.xaxis.range[1] > 210", timeout=30_000)
    for s in (200, 201):
        step(s)
        wait_trace(page, LOSS, f"x.includes({s})")
    assert page.evaluate(f"() => document.getElementById('{LOSS}').layout.xaxis.range[1]") > 210
    assert errors == []


def sampled_bytes(node: dict, names: tuple[str, ...], inside: bool = False) -> int:
    """Bytes V8's sampling heap profile puts in functions named `names` and what they called."""
    inside = inside or any(n in node["callFrame"]["functionName"] for n in names)
    return (node["selfSize"] if inside else 0) + sum(sampled_bytes(c, names, inside) for c in node.get("children", []))


class Storm:
    """A detector storm on a live chart: 62 marks held (60 lines, their labels folded, and two bands) and one more at
    each step, set as a new list with each live point; `sampled()` runs `updates` such steps under V8's sampling heap
    profile (an allocation sampled about every 128 bytes, collected ones too)."""

    def __init__(self, trainer, servers, new_page, run_id):
        live_run(trainer, servers, run_id, "storm")  # a loss falling from 4.0 to 3.005 over steps 0..199
        trainer.send("heartbeat", phase="training", step=199, tokens=199 * 4096, token_budget=10**9, eta_s=None,
                     steps_per_s=2.0, since_step_s=0.0, pid=1)  # (room on x for the live points: one x range drawn)
        self.trainer = trainer
        self.page, self.errors = opened(new_page, servers, run_id)
        self.held = [f"{{id: 'l{s}', x0: {s}, label: 'mark {s}', collapse: true, hover: 'step {s}', "
                     f"metric: '{contract.M_LOSS}'}}" for s in range(2, 182, 3)]  # 60 marks, their labels folded
        self.held += [f"{{id: 'b{a}', x0: {a}, x1: {b}, metric: '{contract.M_LOSS}'}}"
                      for a, b in ((10, 14), (100, 110))]

    def step(self, s: int) -> None:
        self.trainer.metrics(s, **{contract.M_LOSS: 3.5})  # (inside the y range drawn)

    def storm(self, s: int) -> None:  # the held marks and one more at each step: a new list
        self.page.evaluate(
            f"() => Obs.setOverlays('test', [{', '.join(self.held)}, ...Array.from({{length: {s - 199}}}, (_, i) => "
            f"({{id: 'n' + i, x0: 200 + i, label: 'new ' + i, collapse: true, hover: 'new ' + i, "
            f"metric: '{contract.M_LOSS}'}}))])")

    def sampled(self, updates: int = 20) -> tuple[dict, dict, dict]:
        """Steps 201..200 + updates, each with its marks, drawn as live tails: (the heap profile's head, the draw
        counts before and after)."""
        page = self.page
        self.storm(200)
        self.step(200)
        page.wait_for_function(f"() => ({SHAPES})().includes(200)", timeout=30_000)
        cdp = page.context.new_cdp_session(page)
        cdp.send("HeapProfiler.enable")
        cdp.send("HeapProfiler.startSampling", {"samplingInterval": 128, "includeObjectsCollectedByMajorGC": True,
                                                "includeObjectsCollectedByMinorGC": True})
        before = page.evaluate(COUNTS)
        for s in range(201, 201 + updates):
            self.storm(s)
            self.step(s)
            page.wait_for_function(f"() => ({SHAPES})().includes({s})", timeout=30_000)
            wait_trace(page, LOSS, f"x.includes({s})")
        head = cdp.send("HeapProfiler.stopSampling")["profile"]["head"]
        after = page.evaluate(COUNTS)
        assert after["tail"] - before["tail"] >= updates // 2, f"live updates drawn as their tails: {before} {after}"
        return head, before, after


def test_marks_placed_again_unchanged_make_no_text(trainer, servers, new_page, run_id):
    """A detector storm: a live chart's marks change at almost every step (one more), and the marks already placed
    are placed again with each: those unchanged make no style text, no hover text (made when read) and no position
    (V8's sampling heap profile, an allocation sampled about every 128 bytes, collected ones too; landed: ~480
    bytes a mark held an update, ~30 KB an update here)."""
    st = Storm(trainer, servers, new_page, run_id)
    page, errors, updates = st.page, st.errors, 20
    head, _, _ = st.sampled(updates)
    per_mark = sampled_bytes(head, ("placeShapes", "placeLabels", "groupHover")) / updates / len(page.evaluate(SHAPES))
    # (a style text is ~100 bytes, a hover text more; what is left is V8's baseline code boxing the x it compares)
    assert per_mark < 128, f"{per_mark:.0f} bytes a mark held, an update, placing marks that did not change"
    assert errors == []


def test_marks_made_again_unchanged_are_the_same_objects(trainer, servers, new_page, run_id):
    """A detector storm: a live chart's marks change at almost every step (one more), and the model of its marks
    (chartmarks.js: shapes, labels, their folding) is made again with each: the marks that did not change keep their
    shape and label objects and are folded with no object a mark (V8's sampling heap profile, an allocation sampled
    about every 128 bytes, collected ones too)."""
    st = Storm(trainer, servers, new_page, run_id)
    page, errors = st.page, st.errors
    kept = f"() => {{ const l = document.getElementById('{LOSS}').layout; return [...l.shapes, ...l.annotations]; }}"
    updates = 20
    head, _, after = st.sampled(updates)
    # one more mark and live point: the held marks' shapes (the two bands, the 60 lines) and labels are the objects
    # made before (where the chart is not drawn in full again: a new figure has new marks)
    page.evaluate(f"() => {{ window.keptMarks = ({kept})(); }}")
    st.storm(201 + updates)
    st.step(201 + updates)
    page.wait_for_function(f"() => ({SHAPES})().includes({201 + updates})", timeout=30_000)
    same = page.evaluate(f"() => {{ const now = new Set(({kept})()); return window.keptMarks.filter((o) => now.has(o))"
                         ".length; }")
    assert page.evaluate(COUNTS)["full"] == after["full"], "a change of the marks alone is no full redraw"
    assert same >= 62, f"{same} of the held marks' shapes and labels kept"
    # a label kept says its marks' hover texts as they are now: the held marks again, with new hover texts
    again = ", ".join(st.held).replace("hover: ", "hover: 'now ' + ")
    page.evaluate(f"() => Obs.setOverlays('test', [{again}])")
    st.step(202 + updates)
    page.wait_for_function(f"() => ({HOVERS})().some((h) => h && h.includes('now step'))", timeout=30_000)
    lines = [line for h in page.evaluate(HOVERS) if h for line in h.split("<br>")]
    stale = [line for line in lines if re.fullmatch(r"step \d+", line)]  # (a held mark's hover text before)
    assert "now step 2" in lines and not stale, stale
    per_mark = sampled_bytes(head, ("marks",)) / updates / len(page.evaluate(SHAPES))
    # (landed: ~410 bytes a mark, an update: a shape and its line, a label, an object a mark for the sort, the
    # group's id; what is left, ~180, is mostly V8's baseline code boxing the x it compares: 20 updates are not hot)
    assert per_mark < 256, f"{per_mark:.0f} bytes a mark held, an update, making the marks' model again"
    assert errors == []
