"""The front page's featured curve in the dashboard's palette (issue 46: it was drawn in a blue of its own, dark on
the dark theme), in both themes and after the header's theme toggle."""

from __future__ import annotations

import pytest

from ..dashboard.conftest import apply, demo_messages, web  # noqa: F401  (fixture)
from ..servers import page_errors

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CURVE = ("() => { const d = document.getElementById('front-chart'); const t = d && d._figure && d.data && "
         "d.data.find((t) => t.name === 'train/loss'); return t ? t.line.color : null; }")
DASHBOARD = "() => { const d = document.getElementById('chart-train-loss'); return d && d._figure && d.data ? " \
            "d.data.filter((t) => t.mode === 'lines')[0].line.color : null; }"


@pytest.fixture
def run(live_env):
    apply("demo-a", demo_messages("demo-a"))


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_featured_curve_takes_the_dashboards_colour(run, web, new_page, scheme):
    page = new_page(viewport={"width": 1400, "height": 900}, color_scheme=scheme)
    errors = page_errors(page)
    page.goto(f"{web.url}/runs/demo-a/")
    page.wait_for_function(f"() => ({DASHBOARD})() !== null", timeout=30_000)
    dashboard = page.evaluate(DASHBOARD)
    page.goto(web.url + "/")
    page.wait_for_function(f"() => ({CURVE})() !== null", timeout=30_000)
    assert page.evaluate(CURVE) == dashboard == page.evaluate("() => Obs.lineColor(0)")
    page.click("#theme-toggle")  # the other theme, by choice: the curve redrawn in its palette
    page.wait_for_function(f"() => ({CURVE})() === Obs.lineColor(0) && ({CURVE})() !== '{dashboard}'",
                           timeout=30_000)
    assert errors == []
