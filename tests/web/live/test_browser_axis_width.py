"""A chart's y axis is as wide as its tick labels as drawn (static/js/plot.js measures them): a live value whose labels
are wider widens the axis on the same uPlot chart, which is not rebuilt for a new margin (charts.js no longer
estimates the axis's width from the data's extents in characters, a second road to the same width)."""

import pytest

from observatory import contract

from ..servers import live_run, page_errors, wait_trace

pytestmark = [pytest.mark.browser, pytest.mark.slow]

LOSS = "chart-train-loss"
# The loss chart's widest y tick label (as uPlot drew them at 11 px) and the plot area's left edge (CSS px)
LABELS = f"""() => {{ const n = document.getElementById('{LOSS}'), f = n._figure;
  const c = document.createElement('canvas').getContext('2d'); c.font = '11px system-ui, sans-serif';
  return {{labels: f.ticks.y, width: Math.ceil(Math.max(0, ...(f.ticks.y || []).map((t) =>
    c.measureText(String(t ?? '')).width))), left: f.u.over.offsetLeft}}; }}"""


def test_a_live_value_with_wider_labels_widens_the_axis_on_the_same_chart(trainer, servers, new_page, run_id):
    live_run(trainer, servers, run_id, "axis width")  # a loss falling from 4.0 to 3.005 over steps 0..199
    page = new_page(viewport={"width": 1400, "height": 900})
    errors = page_errors(page)
    page.goto(f"{servers.url}/runs/{run_id}/")
    page.wait_for_function("() => document.getElementById('stat-conn').textContent === 'live' && "
                           "performance.getEntriesByName('obs-charts-drawn').length > 0", timeout=60_000)
    page.evaluate(f"() => {{ document.querySelector('#{LOSS} .uplot').obsKept = true; }}")
    narrow = page.evaluate(LABELS)

    trainer.metrics(200, **{contract.M_LOSS: 12345.6})  # labels of five digits, or in "e" notation
    wait_trace(page, LOSS, "x.includes(200)")
    page.wait_for_function(f"() => document.getElementById('{LOSS}').layout.yaxis.range[1] > 12000", timeout=30_000)
    wide = page.evaluate(LABELS)
    assert wide["width"] > narrow["width"], (narrow, wide)
    assert wide["width"] + 8 <= wide["left"], f"the axis fits its labels: {wide}"
    assert page.evaluate(f"() => document.querySelector('#{LOSS} .uplot').obsKept === true"), \
        "the same uPlot chart, its axis widened: not rebuilt for a margin"
    assert errors == []
