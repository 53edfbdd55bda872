"""Live marks are cheap: on a live chart a change of its marks redraws only the marks (no full Plotly redraw; the
points appended in place since the last full redraw stay drawn), and a live point past the chart's axes still gets
a full redraw that shows it. Obs.redrawCounts says which kind of redraw the charts did."""

import pytest

from observatory import contract

from ..servers import live_run, page_errors, wait_trace

pytestmark = [pytest.mark.browser, pytest.mark.slow]

LOSS = "chart-train-loss"
COUNTS = "() => ({...Obs.redrawCounts})"
LABELS = (f"() => ((document.getElementById('{LOSS}').layout || {{}}).annotations || [])"
          ".filter((a) => a.visible !== false).map((a) => a.text)")
# The points of a drawn tail piece (a polyline), or of every piece of a chart's tail, in order: [[x, y], ...]
TAIL_POINTS = ("(el) => [...(el.matches('polyline') ? [el] : el.querySelectorAll('.obs-tails .obs-tail'))]"
               ".flatMap((p) => Array.from({length: p.points.numberOfItems},"
               " (_, i) => [p.points.getItem(i).x, p.points.getItem(i).y]))")
SHAPES = f"() => ((document.getElementById('{LOSS}').layout || {{}}).shapes || []).map((s) => s.x0)"


def marks(*steps: int) -> str:
    """Marks on the loss chart through the feature modules' overlay API (what anomalies.js and the others call)."""
    items = ", ".join(f"{{id: 'test-{s}', x0: {s}, label: 'mark {s}', metric: '{contract.M_LOSS}'}}" for s in steps)
    return f"() => Obs.setOverlays('test', [{items}])"


def opened(new_page, servers, run_id):
    """The run's dashboard at desktop size, live and every chart drawn by Plotly; (page, its errors as they come)."""
    page = new_page(viewport={"width": 1400, "height": 900})
    errors = page_errors(page)
    page.goto(f"{servers.url}/runs/{run_id}/")
    page.wait_for_function("() => document.getElementById('stat-conn').textContent === 'live' && "
                           "performance.getEntriesByName('obs-plotly-drawn').length > 0", timeout=60_000)
    return page, errors


def test_a_live_marks_change_redraws_only_the_marks_and_a_point_past_the_axes_redraws_fully(trainer, servers,
                                                                                           new_page, run_id):
    step = live_run(trainer, servers, run_id, "live marks")
    page, errors = opened(new_page, servers, run_id)

    # A first labelled mark (drawn into the label row kept above the plot), and the live point 200.
    page.evaluate(marks(100))
    step(200)
    wait_trace(page, LOSS, "x.includes(200)")
    page.wait_for_function(f"() => ({LABELS})().includes('mark 100')", timeout=30_000)
    x_end = page.evaluate(f"() => document.getElementById('{LOSS}').layout.xaxis.range[1]")
    assert x_end > 200, "a live chart's x axis keeps room for the next points"
    before = page.evaluate(COUNTS)

    # A live point inside the axes is appended to the drawn line in place.
    step(201)
    wait_trace(page, LOSS, "x.includes(201)")
    # (Plotly's line, then the tail of live points drawn beside it since Plotly last drew it)
    line = f"""() => {{ const gd = document.getElementById('{LOSS}');
        const g = gd.querySelector('.trace' + gd._fullData[0].uid);
        return {{d: g.querySelector('.js-line').getAttribute('d'), tail: ({TAIL_POINTS})(gd)}}; }}"""
    drawn = page.evaluate(line)
    assert len(drawn["tail"]) == 2, "the tail: from the line's last point to the live point"
    looks = page.evaluate(f"""() => {{ const gd = document.getElementById('{LOSS}');
        const look = (el) => {{ const c = getComputedStyle(el);
                                return [c.stroke, c.strokeWidth, c.strokeOpacity, c.fill]; }};
        return [look(gd.querySelector('.trace' + gd._fullData[0].uid + ' .js-line')),
                look(gd.querySelector('.obs-tails .obs-tail'))]; }}""")
    assert looks[0] == looks[1] and looks[1][3] == "none", "the tail is drawn in the line's look"

    # A second mark, and another live point: the point is appended in place, the marks alone redrawn; the line
    # as drawn stays (Plotly redraws no trace: its path keeps every point appended in place).
    page.evaluate(marks(100, 150))
    step(202)
    page.wait_for_function(f"() => ({LABELS})().includes('mark 150')", timeout=30_000)
    wait_trace(page, LOSS, "x.includes(202)")
    after = page.evaluate(COUNTS)
    assert after["full"] == before["full"], (before, after)
    assert after["remark"] > before["remark"] and after["append"] > before["append"], (before, after)
    assert page.evaluate(SHAPES) == [100, 150]
    assert page.locator(f"#{LOSS} .annotation-text-g:visible", has_text="mark 150").count() == 1, "the new label"
    assert page.locator(f"#{LOSS} .annotation-text-g:visible", has_text="mark 100").count() == 1, "the old one stays"
    now = page.evaluate(line)
    assert now["d"] == drawn["d"], "the line was not redrawn"
    assert now["tail"][:-1] == drawn["tail"] and len(now["tail"]) == 3, "one point appended to the tail"
    assert now["tail"][-1][0] == pytest.approx(
        page.evaluate(f"() => document.getElementById('{LOSS}')._fullLayout.xaxis.l2p(202)"), abs=1.0)

    # A third mark: the labels drawn by the page that did not change are kept as they are, the new one added.
    label = f"(t) => [...document.querySelectorAll('#{LOSS} .obs-labels .annotation')].find((g) => g.textContent === t)"
    page.evaluate(f"() => {{ ({label})('mark 150').dataset.probe = 'kept'; }}")
    page.evaluate(marks(50, 100, 150))
    step(203)
    page.wait_for_function(f"() => Boolean(({label})('mark 50'))", timeout=30_000)
    assert page.evaluate(f"() => ({label})('mark 150').dataset.probe") == "kept"
    assert page.evaluate(COUNTS)["full"] == before["full"]

    # A point past the x axis's end: a full redraw, which draws it.
    far = int(x_end) + 50
    step(far)
    wait_trace(page, LOSS, f"x.includes({far})")
    page.wait_for_function(f"() => Obs.redrawCounts.full > {after['full']} && "
                           f"document.getElementById('{LOSS}')._fullLayout.xaxis.range[1] > {far}", timeout=30_000)
    assert page.evaluate(SHAPES) == [50, 100, 150] and "mark 150" in page.evaluate(LABELS)
    # Plotly's line now holds the live points drawn as a tail before: the tail is gone, the line ends at `far`
    assert page.locator(f"#{LOSS} .obs-tail").count() == 0
    full_line = page.evaluate(line)["d"]
    assert float(full_line[full_line.rindex("L") + 1:].split(",")[0]) == pytest.approx(
        page.evaluate(f"() => document.getElementById('{LOSS}')._fullLayout.xaxis.l2p({far})"), abs=1.0)
    assert errors == []


def test_many_marks_are_drawn_as_one_path_a_look_and_a_new_one_redraws_only_the_marks(trainer, servers, new_page,
                                                                                      run_id):
    step = live_run(trainer, servers, run_id, "many marks")
    page = new_page(viewport={"width": 1400, "height": 900})
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{servers.url}/runs/{run_id}/")
    page.wait_for_function("() => document.getElementById('stat-conn').textContent === 'live' && "
                           "performance.getEntriesByName('obs-plotly-drawn').length > 0", timeout=60_000)
    lines, bands = list(range(2, 182, 3)), [(10, 14), (100, 110)]  # 60 lines, 2 bands

    def overlays(extra=()):
        items = [f"{{id: 'l{s}', x0: {s}, label: 'mark {s}', collapse: true, metric: '{contract.M_LOSS}'}}"
                 for s in [*lines, *extra]]
        items += [f"{{id: 'b{a}', x0: {a}, x1: {b}, metric: '{contract.M_LOSS}'}}" for a, b in bands]
        return f"() => Obs.setOverlays('test', [{', '.join(items)}])"

    page.evaluate(overlays())
    step(200)
    shapes = f"() => (document.getElementById('{LOSS}').layout.shapes || []).map((s) => s.path || '')"
    page.wait_for_function(f"() => ({shapes})().join('').includes('M179,0V1')", timeout=30_000)
    wait_trace(page, LOSS, "x.includes(200)")
    paths = page.evaluate(shapes)
    assert len(paths) == 2, paths  # one for the lines, one for the bands
    assert sorted(p.count("M") for p in paths) == [2, 60]
    drawn = page.evaluate(f"() => [...document.querySelectorAll('#{LOSS} .shapelayer path')]"
                          ".map((e) => (e.getAttribute('d').match(/M/g) || []).length)")
    assert sorted(drawn) == [2, 60], "Plotly draws every mark of the merged shapes"
    labels = page.evaluate(LABELS)
    assert labels and any("+" in t for t in labels), "close labels still fold into one with a count"
    before = page.evaluate(COUNTS)

    page.evaluate(overlays(extra=[190]))
    step(201)
    page.wait_for_function(f"() => ({shapes})().join('').includes('M190,0V1')", timeout=30_000)
    wait_trace(page, LOSS, "x.includes(201)")
    after = page.evaluate(COUNTS)
    assert after["full"] == before["full"] and after["remark"] > before["remark"], (before, after)
    # a live chart no pointer is over: the page draws the new marks itself, shapes and labels (Plotly's hidden)
    drawn = page.evaluate(f"() => [...document.querySelectorAll('#{LOSS} .obs-marks path')]"
                          ".map((e) => (e.getAttribute('d').match(/M/g) || []).length)")
    assert sorted(drawn) == [2, 61]
    own = page.evaluate(f"() => [...document.querySelectorAll('#{LOSS} .obs-labels .annotation')]"
                        ".map((e) => e.textContent)")
    assert own == [t for t in page.evaluate(LABELS) if t], "the labels drawn are the layout's"
    assert page.locator(f"#{LOSS} .main-svg .annotation:visible").count() == 0
    # a label the page drew has Plotly's hover box and a label's click (a folded one zooms in on its marks); the
    # events go to the label itself (a pointer entering the chart hands the labels back to Plotly)
    folded = f"#{LOSS} .obs-labels .annotation:has-text('+') >> nth=0"
    page.dispatch_event(folded, "mouseover")
    page.wait_for_selector(f"#{LOSS} .hoverlayer .hovertext", timeout=10_000)
    assert "mark 2" in page.text_content(f"#{LOSS} .hoverlayer")
    page.dispatch_event(folded, "click")
    page.wait_for_function("() => document.getElementById('range-to').value !== ''", timeout=30_000)
    frm, to = (int(page.input_value(f"#range-{k}")) for k in ("from", "to"))
    assert frm <= 2 < to < 180, (frm, to)
    assert errors == []


def test_a_training_runs_charts_keep_room_for_live_points_from_the_start(trainer, servers, new_page, run_id):
    """With the trainer's heartbeat giving its rate, a chart is drawn with room on x for the next points before any
    live point came: the first live points are drawn in place (a tail beside Plotly's line), no full redraw."""
    step = live_run(trainer, servers, run_id, "room ahead")
    trainer.send("heartbeat", phase="training", step=199, tokens=199 * 4096, token_budget=10**9, eta_s=None,
                 steps_per_s=2.0, since_step_s=0.0, pid=1)
    page, errors = opened(new_page, servers, run_id)
    page.wait_for_function(f"() => document.getElementById('{LOSS}').layout.xaxis.range && "
                           f"document.getElementById('{LOSS}').layout.xaxis.range[1] > 210", timeout=30_000)
    before = page.evaluate(COUNTS)
    for s in (200, 201):
        step(s)
        wait_trace(page, LOSS, f"x.includes({s})")
    page.wait_for_function(f"() => Obs.redrawCounts.append >= {before['append']} + 1", timeout=30_000)
    after = page.evaluate(COUNTS)
    # (a full redraw for other reasons may come meanwhile, a busy box's backfill: none for a point past the axes)
    assert after["append"] > before["append"] and "x range" not in after["miss"], (before, after)
    assert page.locator(f"#{LOSS} .obs-tail").count() == 1

    # A long tail is drawn in pieces (an update rewrites only the last): each starts where the one before ends, and
    # together they reach the last live point. (Values inside the drawn y range: a point outside it is a full redraw.)
    for s in range(202, 240):
        trainer.metrics(s, **{contract.M_LOSS: 3.5 + 0.01 * (s % 7)})
    wait_trace(page, LOSS, "x.includes(239)")
    pieces = page.evaluate(f"""() => [...document.querySelectorAll('#{LOSS} .obs-tails .obs-tail')]
        .map((p) => ({TAIL_POINTS})(p))""")
    # the last step Plotly itself drew (199; 200 where a busy box's backfill made a full redraw before 201 came)
    plotly_to = page.evaluate(f"() => {{ const cd = document.getElementById('{LOSS}').calcdata[0]; "
                              "return cd[cd.length - 1].x; }")
    if page.evaluate(COUNTS)["full"] == after["full"]:  # (a busy box's backfill may make a full redraw: no tail)
        assert 199 <= plotly_to <= 200, plotly_to
        assert len(pieces) >= 2, pieces
        assert all(a[-1] == b[0] for a, b in zip(pieces, pieces[1:])), "the pieces join"
        assert sum(len(p) - 1 for p in pieces) == 239 - plotly_to, "one segment a live point since Plotly's last"
        assert pieces[-1][-1][0] == pytest.approx(
            page.evaluate(f"() => document.getElementById('{LOSS}')._fullLayout.xaxis.l2p(239)"), abs=1.0)
    assert errors == []


def test_a_shapes_only_change_is_drawn_by_the_page_and_the_next_full_redraw_hands_it_back_to_plotly(
        trainer, servers, new_page, run_id):
    """A marks change that leaves the labels as they are (a band without a label) is drawn by the page itself over
    the drawn chart, Plotly's shape layers hidden meanwhile (no Plotly call); the layout holds the new shapes, and
    the next full redraw has Plotly draw every shape again, the page's own drawing gone."""
    step = live_run(trainer, servers, run_id, "own shapes")
    page, errors = opened(new_page, servers, run_id)

    def overlays(*bands):
        items = ", ".join(f"{{id: 'b{a}', x0: {a}, x1: {b}, metric: '{contract.M_LOSS}'}}" for a, b in bands)
        mark = f"{{id: 'l50', x0: 50, label: 'mark 50', metric: '{contract.M_LOSS}'}}"
        return f"() => Obs.setOverlays('test', [{mark}, {items}])"

    page.evaluate(overlays((10, 20)))
    step(200)
    wait_trace(page, LOSS, "x.includes(200)")
    page.wait_for_function(f"() => ({SHAPES})().includes(10)", timeout=30_000)
    x_end = page.evaluate(f"() => document.getElementById('{LOSS}').layout.xaxis.range[1]")
    plotly_shapes = f"() => [...document.querySelectorAll('#{LOSS} .main-svg .shapelayer path')].length"
    assert page.evaluate(plotly_shapes) == 2  # the line at 50 and the band 10-20, drawn by Plotly
    before = page.evaluate(COUNTS)

    page.evaluate(overlays((10, 20), (120, 140)))
    step(201)
    page.wait_for_function(f"() => ({SHAPES})().includes(120)", timeout=30_000)
    wait_trace(page, LOSS, "x.includes(201)")
    after = page.evaluate(COUNTS)
    assert after["full"] == before["full"] and after["remark"] > before["remark"], (before, after)
    assert page.locator(f"#{LOSS}.obs-own-marks").count() == 1
    assert not page.locator(f"#{LOSS} .main-svg .shapelayer").first.is_visible()
    own = page.evaluate(f"""() => [...document.querySelectorAll('#{LOSS} .obs-marks path')].map((p) => ({{
        fill: p.getAttribute('fill'), d: p.getAttribute('d')}}))""")
    assert len(own) == 3, own
    band = next(p for p in own if p["d"].startswith("M") and "H" in p["d"] and
                abs(float(p["d"][1:].split(",")[0]) - page.evaluate(
                    f"() => document.getElementById('{LOSS}')._fullLayout.xaxis.l2p(120)")) < 1.0)
    assert band["fill"].startswith("rgba"), band

    # A point past the x axis's end: a full redraw; Plotly draws every shape again, the page's drawing is gone.
    far = int(x_end) + 50
    step(far)
    page.wait_for_function(f"() => Obs.redrawCounts.full > {after['full']} && "
                           f"document.getElementById('{LOSS}')._fullLayout.xaxis.range[1] > {far}", timeout=30_000)
    assert page.locator(f"#{LOSS} .obs-marks").count() == 0 and page.locator(f"#{LOSS}.obs-own-marks").count() == 0
    assert page.evaluate(plotly_shapes) == 3
    assert errors == []
