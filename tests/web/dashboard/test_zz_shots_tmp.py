"""Temporary (not committed): screenshots of the dashboard and front page, light and dark, desktop and phone."""

import pytest

from .conftest import apply, demo_messages

pytestmark = [pytest.mark.browser, pytest.mark.slow]
OUT = "/work/notes/shots"
DRAWN = ("() => document.querySelectorAll('#charts .chart .plot .uplot').length >= 1 && "
         "document.querySelectorAll('#events li').length > 3")


@pytest.fixture
def runs(live_env):
    apply("demo-a", demo_messages("demo-a"))


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("width,height,scale", [(1280, 800, 1), (390, 844, 2)])
def test_shots(runs, web, new_page, width, height, scale, scheme):
    page = new_page(viewport={"width": width, "height": height}, device_scale_factor=scale, color_scheme=scheme)
    errors = []
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.on("pageerror", lambda e: errors.append(str(e)))
    kind = "desktop" if width > 600 else "phone"
    page.goto(web.url + "/runs/demo-a/")
    page.wait_for_function(DRAWN, timeout=60_000)
    page.wait_for_timeout(500)  # (a screenshot only: the charts' last frame)
    page.screenshot(path=f"{OUT}/dashboard-{kind}-{scheme}.png")
    page.screenshot(path=f"{OUT}/dashboard-{kind}-{scheme}-full.png", full_page=True)
    page.goto(web.url + "/")
    page.wait_for_function("() => !!document.querySelector('#front-chart .uplot')", timeout=60_000)
    page.wait_for_timeout(500)
    page.screenshot(path=f"{OUT}/front-{kind}-{scheme}.png", full_page=True)
    assert errors == []
