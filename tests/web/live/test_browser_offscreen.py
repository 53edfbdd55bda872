"""Draw only what is seen: a chart below the fold draws nothing while live points arrive (the charts in view draw
them), and once scrolled into view it draws every point that came while it was off screen, each once; the data
panel's live weights and the anomaly panel's list likewise."""

import pytest

from observatory import contract

from ..anomalies import curves
from ..servers import get_json, trace_js, wait_for, wait_ingested, wait_trace

pytestmark = [pytest.mark.browser, pytest.mark.slow]

LOSS, BELOW = "chart-train-loss", "chart-grad-norm-total"
TWO_FRAMES = "() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)))"  # (drawn, if it would)


def test_a_chart_scrolled_into_view_draws_what_arrived_while_it_was_off_screen(trainer, servers, new_page, run_id):
    def step(s):  # (the learning rate too: a run gets the default charts of the series it has, and the grad-norm
        # chart, the third, is then on the second row, below the fold)
        trainer.metrics(s, **{contract.M_LOSS: 4.0 - 0.01 * s, contract.M_LR: 1e-3,
                              contract.M_GRAD_NORM: 1.0 + 0.01 * s})

    trainer.send("run", name="off screen", config={})
    trainer.send("state", state="training", step=0, detail="")
    for s in range(5):
        step(s)
    wait_ingested(run_id, 4)
    servers.wait_web()
    page = new_page(viewport={"width": 1000, "height": 560})  # the first row of charts only
    page.goto(f"{servers.url}/runs/{run_id}/")
    wait_trace(page, LOSS, "x.length === 5")
    page.wait_for_function("() => document.getElementById('stat-conn').textContent === 'live'", timeout=30_000)
    below = page.evaluate(f"() => document.getElementById('{BELOW}').getBoundingClientRect().top")
    assert below > 560 + 100, "the grad-norm chart starts below the fold"

    for s in range(5, 40):
        step(s)
    wait_trace(page, LOSS, "x.includes(39)")  # the charts in view have drawn step 39: a redraw has happened
    page.evaluate(TWO_FRAMES)
    drawn = page.evaluate(trace_js(BELOW)) or []
    assert 39 not in drawn, "a chart off screen draws nothing"

    page.evaluate(f"() => document.getElementById('{BELOW}').scrollIntoView()")
    wait_trace(page, BELOW, "x.includes(39)")
    assert page.evaluate(trace_js(BELOW)) == list(range(40))
    assert page.evaluate(trace_js(BELOW, "y"))[-1] == pytest.approx(1.39)


def test_the_data_panel_writes_its_live_weights_only_on_screen(trainer, servers, new_page, run_id):
    weight = contract.mixture_weight("web")

    def step(s, w):
        trainer.metrics(s, **{contract.M_LOSS: 4.0 - 0.01 * s, weight: w})

    trainer.send("run", name="weights off screen", config={})
    trainer.send("state", state="training", step=0, detail="")
    for s in range(5):
        step(s, 0.5)
    wait_ingested(run_id, 4)
    servers.wait_web()
    page = new_page(viewport={"width": 1000, "height": 560})
    page.goto(f"{servers.url}/runs/{run_id}/")
    cell = "#data-domains tr[data-domain='web'] td.live"
    page.wait_for_function(f"() => document.querySelector({cell!r}) !== null", timeout=30_000)
    page.wait_for_function("() => document.getElementById('stat-conn').textContent === 'live'", timeout=30_000)
    assert page.evaluate("() => document.getElementById('data-panel').getBoundingClientRect().top") > 560 + 100

    for s in range(5, 20):
        step(s, 0.25)
    wait_trace(page, LOSS, "x.includes(19)")  # the page has taken step 19 and drawn what is in view
    page.evaluate(TWO_FRAMES)
    assert page.inner_text(cell) != "25.0%", "a weight off screen is not written"

    page.evaluate("() => document.getElementById('data-panel').scrollIntoView()")
    page.wait_for_function(f"() => document.querySelector({cell!r}).textContent === '25.0%'", timeout=30_000)


def test_the_anomaly_panel_writes_its_list_only_on_screen(trainer, servers, new_page, run_id):
    data = curves.rows(curves.SPIKES[0] + 40)  # a falling loss, a critical loss spike at SPIKES[0]
    curves.started(trainer, servers, "anomalies off screen", data[:5])
    page = new_page(viewport={"width": 1000, "height": 560})
    page.goto(f"{servers.url}/runs/{run_id}/")
    page.wait_for_function("() => document.getElementById('stat-conn').textContent === 'live' && "
                           "document.getElementById('anomaly-panel') !== null", timeout=30_000)
    assert page.evaluate("() => document.getElementById('anomaly-panel').getBoundingClientRect().top") > 560 + 100

    curves.publish(trainer, data[5:])
    api = f"{servers.url}/api/runs/{run_id}/anomalies/?kind=loss_spike"
    spike = wait_for(lambda: next((a for a in (get_json(api) or {}).get("anomalies", [])
                                   if a["start_step"] == curves.SPIKES[0]), None), 60, "the loss spike in the log")
    # the page has taken it: its mark is on the loss chart, in view (marks and list come from the same frames)
    page.wait_for_function(f"() => (document.getElementById('{LOSS}').layout.shapes || [])"
                           f".some((s) => s.x0 === {curves.SPIKES[0]})", timeout=30_000)
    page.evaluate(TWO_FRAMES)
    assert page.locator("#anomaly-panel li").count() == 0, "a list off screen is not written"

    page.evaluate("() => document.getElementById('anomaly-panel').scrollIntoView()")
    page.locator(f'#anomaly-panel li[data-key="{spike["key"]}"]').wait_for(timeout=30_000)
    assert "ongoing" in page.inner_text("#anomaly-panel .count")
