"""A run's progress reads the same on every page (QA, issue 46: the front page and the run list said "0%" where the
dashboard said "0.3%"): one rule (webapp/runs/pagedata.py percent, static/js/plotkit.js Obs.percent), in the pages
the server renders and as their scripts update them."""

import pytest

from webapp.runs.pagedata import percent

from .conftest import in_thread

pytestmark = [pytest.mark.browser, pytest.mark.slow]
FRACTIONS = [0, 1e-4, 0.003, 0.0299999, 0.05, 0.07, 0.0999, 0.0999999999, 0.1, 0.123, 0.29, 1 / 3, 0.5, 2 / 3, 0.9999,
             1.0]
ROW = "tr[data-run=slow] .pct"


def heartbeat(tokens: int) -> dict:
    return {"tokens": tokens, "token_budget": 1000, "eta_s": 600.0, "steps_per_s": 1.0}


def test_a_runs_progress_reads_the_same_on_the_front_page_the_run_list_and_its_dashboard(live_env, web, new_page):
    from webapp.runs.models import Run

    assert [percent(f) for f in (0.003, 0.05, 0.0999, 0.123, 0.9999, 1.0)] == \
        ["0.3%", "5%", "9.9%", "12%", "99%", "100%"]
    Run.objects.create(id="slow", name="slow", state="training", health="alive", last_step=3, heartbeat=heartbeat(3))
    page = new_page(viewport={"width": 1400, "height": 900})
    page.goto(web.url + "/runs/")
    assert page.evaluate("(fs) => fs.map((f) => Obs.percent(f))", FRACTIONS) == [percent(f) for f in FRACTIONS]
    assert page.inner_text(ROW) == "0.3%"
    page.goto(web.url + "/")
    assert page.inner_text("#featured-pct") == "0.3%"
    page.goto(web.url + "/runs/slow/")
    page.wait_for_function("() => document.getElementById('stat-tokens').textContent.includes('of')", timeout=20_000)
    assert "(0.3%)" in page.inner_text("#stat-tokens")
    page.goto(web.url + "/runs/")  # and as the run list's script writes it when the run moves on
    page.wait_for_selector(ROW)
    in_thread(lambda: Run.objects.filter(pk="slow").update(last_step=45, heartbeat=heartbeat(45)))
    page.wait_for_function(f"() => document.querySelector('{ROW}').textContent === '4.5%'", timeout=20_000)
