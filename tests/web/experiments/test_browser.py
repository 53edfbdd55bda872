"""The forecast band on a live run's loss chart from its first points (real ingest + uvicorn, Chromium), arriving
live on a page opened before the trainer published it, and drawn at once after a reload: every drawn
point is the registration's curve as the API serves it, placed at tokens / tokens-per-step; the rung's curve is a
faint overlay; the panel compares the final losses and links the experiment page; axe finds nothing serious; the
console stays clean."""

from __future__ import annotations

import pytest

from observatory import contract

from ..conftest import Trainer
from ..dashboard.conftest import axe_violations
from ..servers import wait_ingested, wait_trace
from . import records

pytestmark = [pytest.mark.browser, pytest.mark.slow]
LOSS = "chart-train-loss"
DRAWN = """() => Array.from(document.getElementById('chart-train-loss').data)
  .filter((t) => typeof t.meta === 'string' && (t.meta.startsWith('forecast') || t.meta === 'rung'))
  .map((t) => ({meta: t.meta, name: t.name, x: Array.from(t.x), y: Array.from(t.y),
                tokens: t.customdata ? Array.from(t.customdata) : null}))"""


def test_the_band_is_drawn_live_from_the_first_points(redis_client, servers, new_page, run_id):
    reg = records.registration(run_id, rungs=("rung-a",))
    rung = Trainer(redis_client, "rung-a")
    rung.send("run", name="rung a", config=records.CONFIG)
    for s in range(1, 21):
        rung.metrics(s, **{contract.M_LOSS: 6.0 - 0.1 * s})
    hero = Trainer(redis_client, run_id)
    hero.send("run", name="hero", config=records.CONFIG, started_at=records.STARTED)
    hero.metrics_named(0, {contract.M_LOSS: 9.0, contract.M_TOTAL_TOKENS: 0.0})
    wait_ingested(run_id, 0)
    servers.wait_web()

    page = new_page()
    errors = []
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{servers.url}/runs/{run_id}/")  # open before the run has published its forecast
    wait_trace(page, LOSS, "x.length === 1")
    page.wait_for_function("() => document.getElementById('stat-conn').textContent === 'live'", timeout=30_000)
    assert page.query_selector("#forecast-panel") is None
    hero.send("event", step=0, name="forecast", payload=reg)  # as the trainer does at its start
    records.metrics(hero, reg, range(1, 4))
    wait_trace(page, LOSS, "x.length === 4")
    page.wait_for_function(f"() => {{ const d = ({DRAWN})(); return d.some((t) => t.meta === 'forecast-high') "
                           "&& d.some((t) => t.meta === 'rung'); }", timeout=30_000)
    api = page.evaluate(f"() => fetch('/api/runs/{run_id}/forecast/').then((r) => r.json())")
    assert api["verified"] is True
    curve, k = api["registration"]["forecast"]["curve"], api["tokens_per_step"]
    drawn = {t["meta"]: t for t in page.evaluate(DRAWN)}
    for meta, key in (("forecast-low", "low"), ("forecast-high", "high"), ("forecast", "loss")):
        t = drawn[meta]
        assert len(t["tokens"]) > 50 and t["tokens"][-1] == curve["tokens"][-1] == records.D  # to the budget
        for x, y, tokens in zip(t["x"], t["y"], t["tokens"]):
            j = curve["tokens"].index(tokens)
            assert y == curve[key][j]
            assert x == pytest.approx(tokens / k)  # the step axis: tokens at this run's tokens per step
    assert drawn["forecast"]["name"] == "forecast"
    rung_tokens = [x * k for x in drawn["rung"]["x"]]
    assert rung_tokens == pytest.approx([s * records.TPS for s in range(1, 21)])

    hero_fc = api["registration"]["forecast"]["hero"]
    panel = page.text_content("#forecast-panel")
    assert f"forecast {hero_fc['loss']:.4g} [{hero_fc['low']:.4g}, {hero_fc['high']:.4g}]" in panel
    assert "before step 0 of " + run_id in panel and "registration intact" in panel
    page.wait_for_function("() => /^[0-9.]+$/.test(document.querySelector('#forecast-panel .fc-live').textContent)")

    records.metrics(hero, reg, range(4, 9))  # live points join; the band stays
    wait_trace(page, LOSS, "x.length === 9")
    assert {t["meta"] for t in page.evaluate(DRAWN)} >= {"forecast-low", "forecast-high", "forecast", "rung"}
    page.reload()  # the page data now says the run has a forecast: drawn from the start
    wait_trace(page, LOSS, "x.length === 9")
    page.wait_for_function(f"() => ({DRAWN})().some((t) => t.meta === 'forecast-high')", timeout=30_000)
    assert axe_violations(page) == []  # the panel and the band keep the dashboard accessible
    page.click("#forecast-panel a.fc-exp")  # to the experiment page
    page.wait_for_selector("[data-testid=verified]")
    assert page.text_content("[data-testid=sha256]") == api["registration"]["sha256"]
    assert axe_violations(page) == []
    assert errors == []
    servers.stop_ingest()
