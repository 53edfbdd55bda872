"""What a user reads on a run's page is true from the first look (issue 43): the anomalies panel lists the run's
anomalies as the page loads, even below the fold (it said "None so far." until scrolled into view); a stopped run
says "stopped", not "live"; a run with a forecast draws its band on the held-out loss once it has one, not on the
noisy training loss; a finished target says how it ended, not "runs high until the learning rate has decayed"."""

from __future__ import annotations

import pytest

from observatory import contract

from ..anomalies import curves
from ..experiments import records
from ..servers import get_json, page_errors, wait_for, wait_ingested

pytestmark = [pytest.mark.browser, pytest.mark.slow]

BAND_ON = """(id) => { const d = document.getElementById(id);
  return !!(d && d.data && Array.from(d.data).some((t) => t.meta === 'forecast-high')); }"""


def test_the_anomalies_panel_is_filled_with_the_page_and_a_stopped_run_says_so(trainer, servers, new_page, run_id):
    data = curves.rows(curves.SPIKES[0] + 40)
    curves.started(trainer, servers, "panel", data)
    trainer.send("state", state="stopped", step=data[-1][0], detail="done")
    wait_for(lambda: (get_json(f"{servers.url}/api/runs/{run_id}/") or {}).get("state") == "stopped", 60,
             "the stopped state")
    api = f"{servers.url}/api/runs/{run_id}/anomalies/"
    found = wait_for(lambda: (get_json(api) or {}).get("anomalies"), 60, "the loss spike in the log")
    page = new_page(viewport={"width": 390, "height": 600})
    errors = page_errors(page)
    page.goto(f"{servers.url}/runs/{run_id}/")
    page.locator("#anomaly-panel .anomaly-list li").first.wait_for(timeout=30_000)
    assert page.evaluate("() => document.getElementById('anomaly-panel').getBoundingClientRect().top") > 600
    assert page.locator("#anomaly-panel .anomaly-list li").count() == min(12, len(found))
    assert page.locator("#anomaly-panel .empty").is_hidden()
    page.wait_for_function("() => document.getElementById('stat-conn').textContent === 'stopped'", timeout=30_000)
    assert errors == []


def test_the_band_is_on_the_held_out_loss_and_a_finished_target_says_how_it_ended(trainer, servers, new_page,
                                                                                    run_id):
    reg = records.registration(run_id, rungs=())
    records.publish(trainer, reg)
    records.metrics(trainer, reg, range(0, 401, 20))
    hero = reg["forecast"]["hero"]
    final = (hero["loss"] + hero["high"]) / 2
    trainer.metrics_named(400, {contract.M_EVAL_LOSS: final})
    wait_ingested(run_id, 400)
    servers.wait_web()
    page = new_page(viewport={"width": 1280, "height": 900})
    errors = page_errors(page)
    page.goto(f"{servers.url}/runs/{run_id}/")
    page.wait_for_function(BAND_ON, arg="chart-eval-loss", timeout=30_000)
    assert not page.evaluate(BAND_ON, "chart-train-loss")  # the run has held-out points: not on the noisy one
    page.wait_for_function("() => /runs high until/.test(document.querySelector('#forecast-panel .fc-how')"
                           ".textContent)", timeout=30_000)  # training: the extrapolation, with its caveat

    trainer.send("state", state="stopped", step=400, detail="token budget reached")
    panel = "document.querySelector('#forecast-panel')"
    page.wait_for_function(f"() => /inside the band/.test({panel}.textContent)", timeout=30_000)
    text = page.text_content("#forecast-panel")
    assert "vs actual" in text and f"{final:.4g}" in text and "runs high" not in text
    assert "registration intact" in text
    assert errors == []


BOX = """(sel) => { const e = document.querySelector(sel); if (!e) return null;
  const r = e.getBoundingClientRect(); return r.width ? {x: r.x, y: r.y, w: r.width, h: r.height} : null; }"""


def test_on_a_phone_the_mode_bar_leaves_the_held_out_charts_legend_with_its_forecast_readable(trainer, servers,
                                                                                              new_page, run_id):
    reg = records.registration(run_id, rungs=())
    records.publish(trainer, reg)
    records.metrics(trainer, reg, range(0, 101, 20))
    for s in range(0, 101, 20):
        trainer.metrics_named(s, {contract.M_EVAL_LOSS: 4.0, **{contract.eval_domain_loss(d): 4.0
                                                                 for d in ("web", "code", "math")}})
    wait_ingested(run_id, 100)
    servers.wait_web()
    page = new_page(viewport={"width": 390, "height": 844})
    page.goto(f"{servers.url}/runs/{run_id}/")
    chart = "chart-eval-loss"
    page.locator(f"#{chart}").scroll_into_view_if_needed()  # (a chart off screen draws nothing: a phone's second)
    page.wait_for_function(f"() => {{ const d = document.getElementById('{chart}'); return d && d.data && "
                           "d.data.some((t) => t.meta === 'forecast') && d.layout && d.layout.showlegend; }",
                           timeout=30_000)
    page.hover(f"#{chart} .u-over")  # the mode bar shows while the chart is hovered (tapped, on a phone)
    page.wait_for_function(f"() => ({BOX})('#{chart} .modebar')", timeout=10_000)
    bar = page.evaluate(BOX, f"#{chart} .modebar")
    items = page.evaluate(f"""() => [...document.querySelectorAll('#{chart} .legend .legend-item')].map((e) => {{
      const r = e.getBoundingClientRect(); return {{x: r.x, y: r.y, w: r.width, h: r.height}}; }})""")
    names = page.evaluate(f"() => [...document.querySelectorAll('#{chart} .legend .legend-item')]"
                          ".map((e) => e.textContent)")
    assert len(items) == 5, names  # eval/loss, three domains, the forecast
    hit = [b for b in items if b["x"] < bar["x"] + bar["w"] and bar["x"] < b["x"] + b["w"]
           and b["y"] < bar["y"] + bar["h"] and bar["y"] < b["y"] + b["h"]]
    assert hit == [], (bar, hit)


def test_on_a_phone_the_front_pages_mode_bar_leaves_its_legend_readable(trainer, servers, new_page, run_id):
    reg = records.registration(run_id, rungs=())
    records.publish(trainer, reg)
    records.metrics(trainer, reg, range(0, 101, 20))
    trainer.send("heartbeat", step=100, phase="training", tokens=100 * records.TPS, token_budget=records.D,
                 eta_s=120.0, steps_per_s=2.0)
    wait_ingested(run_id, 100)
    servers.wait_web()
    page = new_page(viewport={"width": 390, "height": 844})
    page.goto(f"{servers.url}/")
    page.locator("#front-chart").scroll_into_view_if_needed()
    page.wait_for_function("() => { const d = document.getElementById('front-chart'); return d && d.layout && "
                           "d.layout.showlegend; }", timeout=30_000)
    page.hover("#front-chart .u-over")
    page.wait_for_function(f"() => ({BOX})('#front-chart .modebar')", timeout=10_000)
    bar = page.evaluate(BOX, "#front-chart .modebar")
    items = page.evaluate("""() => [...document.querySelectorAll('#front-chart .legend .legend-item')]
      .map((e) => { const r = e.getBoundingClientRect(); return {x: r.x, y: r.y, w: r.width, h: r.height}; })""")
    assert len(items) == 2  # the forecast and the loss (the caption names the band)
    hit = [b for b in items if b["x"] < bar["x"] + bar["w"] and bar["x"] < b["x"] + b["w"]
           and b["y"] < bar["y"] + bar["h"] and bar["y"] < b["y"] + b["h"]]
    assert hit == [], (bar, hit)
