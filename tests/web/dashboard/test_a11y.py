"""Every screen and every keyboard: at phone and desktop widths nothing is wider than the viewport, axe-core finds no
serious or critical WCAG violation (light and dark), and the dashboard works from the keyboard: skip link, a
picker that arrow keys never act on, one tab stop per chart toolbar, no cloud-share button, charts with names and
a data table."""

import os

import pytest

from ..servers import page_errors
from .conftest import OVERFLOW_JS, apply, axe_violations, demo_messages

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SIZES = [(390, 844), (1400, 900)]
# A chart or panel draws once on screen: each poll brings the next one not yet drawn there, as a reader scrolls.
SCROLL_TO_UNDRAWN = "(() => { const next = [...document.querySelectorAll('#charts .chart, #router-panel')].find(" \
                    "(el) => !el.hidden && !el.querySelector('.main-svg, .uplot')); if (next) next.scrollIntoView(); " \
                    "return true; })()"
# Every drawn chart's y tick labels (plot.js's fig.ticks.y, as uPlot drew them at 11 px) fit left of its plot area
# with the tick and gap: a fixed 50 px axis cut "0.00125" to ".00125" on a phone.
CUT_LABELS = "() => { const c = document.createElement('canvas').getContext('2d'); c.font = '11px system-ui, " \
             "sans-serif'; return [...document.querySelectorAll('#charts .chart .plot')].filter((n) => n._figure && " \
             "n._figure.u).map((n) => { const f = n._figure, w = Math.max(0, ...(f.ticks.y || []).map((t) => " \
             "c.measureText(String(t ?? '')).width)); return {id: n.id, labels: f.ticks.y, width: Math.ceil(w), " \
             "left: f.u.over.offsetLeft}; }).filter((a) => !a.labels || !a.labels.length || a.width + 8 > a.left); }"
DRAWN = f"() => {SCROLL_TO_UNDRAWN} && document.querySelectorAll('#charts .chart .plot .uplot').length >= 5 && " \
        "!!document.querySelector('#router-heatmap .main-svg') && document.querySelectorAll('#events li').length > 3"


@pytest.fixture
def runs(live_env):
    from webapp.runs.models import Run

    apply("demo-a", demo_messages("demo-a"))
    Run.objects.create(id="imported-b", name="demo", state="stopped", health="ended", source="wandb", last_step=9)


def shot(page, name):
    d = os.environ.get("OBS_SCREENSHOT_DIR")
    if d:
        page.screenshot(path=os.path.join(d, name), full_page=True)


@pytest.mark.parametrize("width,height", SIZES)
def test_no_overflow_and_no_serious_axe_violation(runs, web, new_page, width, height):
    page = new_page(viewport={"width": width, "height": height})
    errors = page_errors(page)

    page.goto(web.url + "/runs/")
    page.wait_for_selector("tr[data-run='demo-a']")
    layout = page.evaluate(OVERFLOW_JS)
    assert layout["bad"] == [] and layout["scrollWidth"] <= width, layout
    assert axe_violations(page) == []
    shot(page, f"runs-{width}.png")

    page.goto(web.url + "/")  # the front page: the featured run's chart, moments, experiments
    page.wait_for_function("() => !!document.querySelector('#front-chart .uplot')", timeout=30_000)
    layout = page.evaluate(OVERFLOW_JS)
    assert layout["bad"] == [] and layout["scrollWidth"] <= width, layout
    assert axe_violations(page) == []
    shot(page, f"home-{width}.png")

    page.goto(web.url + "/runs/demo-a/")
    page.wait_for_function(DRAWN, timeout=30_000)
    layout = page.evaluate(OVERFLOW_JS)
    assert layout["bad"] == [] and layout["scrollWidth"] <= width, layout
    assert page.evaluate(CUT_LABELS) == []
    assert axe_violations(page) == []
    shot(page, f"dashboard-{width}.png")
    page.click("#theme-toggle")  # dark mode, by choice
    page.wait_for_function("() => document.documentElement.dataset.theme === 'dark'")
    assert axe_violations(page) == []
    shot(page, f"dashboard-dark-{width}.png")
    assert errors == []


def test_the_dashboard_works_from_the_keyboard(runs, web, new_page):
    page = new_page(viewport={"width": 1400, "height": 900})
    page.goto(web.url + "/runs/demo-a/")
    page.wait_for_function(DRAWN, timeout=30_000)

    # The first tab stop skips to the content.
    page.keyboard.press("Tab")
    assert page.evaluate("() => document.activeElement.className") == "skip-link"
    page.keyboard.press("Enter")
    assert page.evaluate("() => document.activeElement.id") == "main"

    # The picker: arrow keys move the choice, Enter adds the chart (and the URL names it).
    charts = "() => [...document.querySelectorAll('#charts .chart')].map((c) => c.dataset.metric)"
    before = page.evaluate(charts)
    page.fill("#metric-search", "mixture weight")
    page.focus("#metric-picker")
    page.keyboard.press("ArrowDown")
    page.keyboard.press("ArrowDown")
    assert page.evaluate(charts) == before, "no chart added by arrow keys alone"
    chosen = page.eval_on_selector("#metric-picker", "s => s.value")
    assert chosen and chosen not in before
    page.keyboard.press("Enter")
    page.wait_for_function(f"() => ({charts})().length === {len(before) + 1}")
    assert page.evaluate(charts)[-1] == chosen
    page.wait_for_function("(c) => decodeURIComponent(location.search).includes(c)", arg=chosen)  # (a moment later)
    # ... it moves up, and goes away again; a reload keeps the layout (localStorage)
    page.click(f'.chart[data-metric="{chosen}"] .tool.up')
    assert page.evaluate(charts)[-2] == chosen
    page.click(f'.chart[data-metric="{chosen}"] .tool.remove')
    assert page.evaluate(charts) == before
    page.click('.chart[data-metric="train/loss"] .tool.down')
    order = page.evaluate(charts)
    page.goto(web.url + "/runs/demo-a/")
    page.wait_for_function(DRAWN, timeout=30_000)
    assert page.evaluate(charts) == order

    # Each chart's Plotly toolbar is one tab stop, labelled; there is no cloud-share button.
    bars = page.evaluate("""() => [...document.querySelectorAll('#charts .modebar')].map((b) => ({
        label: b.getAttribute('aria-label'), role: b.getAttribute('role'),
        stops: [...b.querySelectorAll('button')].filter((x) => x.tabIndex >= 0).length,
        titles: [...b.querySelectorAll('button')].map((x) => x.dataset.title)}))""")
    assert bars and all(b["stops"] == 1 and b["role"] == "toolbar" and b["label"] for b in bars), bars
    assert not any("share" in (t or "").lower() or "cloud" in (t or "").lower() for b in bars for t in b["titles"])
    first = page.locator("#charts .modebar button[tabindex='0']").first
    first.focus()
    page.keyboard.press("ArrowRight")
    assert page.evaluate("() => document.activeElement.dataset.title") == bars[0]["titles"][1]
    assert page.evaluate("() => getComputedStyle(document.activeElement).outlineStyle") != "none"

    # Charts have names, a one-line meaning and a data table.
    named = page.evaluate("""() => Object.fromEntries([...document.querySelectorAll('#charts figure.chart')].map((f) =>
        [f.dataset.metric, document.getElementById(f.getAttribute('aria-labelledby')).textContent.trim()]))""")
    assert named["train/loss"] == "Training loss (nats)" and all(named.values())
    page.click('.chart[data-metric="train/loss"] .table-alt summary')
    page.wait_for_function("() => document.querySelectorAll('.chart[data-metric=\"train/loss\"] table.data-table "
                           "tbody tr').length >= 50")


def test_the_url_holds_smoothing_log_axes_and_the_x_axis(runs, web, new_page):
    page = new_page(viewport={"width": 1400, "height": 900})
    page.goto(web.url + "/runs/demo-a/?smooth=0.9&log=train/loss&x=tokens")
    loss = "() => { const d = document.getElementById('chart-train-loss'); return d && d.data && d.data.length ? " \
           "{n: d.data.length, layout: d.layout, data: d.data.map((t) => ({x: Array.from(t.x), y: Array.from(t.y), " \
           "mode: t.mode, opacity: t.opacity, name: t.name}))} : null; }"
    page.wait_for_function(f"() => {{ const c = ({loss})(); return c && c.n === 12 && c.data[0].x.length === 60 && "
                           "c.data[0].x[0] === 1024; }", timeout=30_000)  # (drawn on the tokens axis once it is in)
    c = page.evaluate(loss)
    raw, smooth = c["data"][0], c["data"][9]  # 3 lines, 3 non-finite, 3 impossible, then the smoothed lines
    assert raw["opacity"] < 0.5 and smooth["mode"] == "lines" and "smoothed" in smooth["name"]
    assert smooth["y"][0] == pytest.approx(raw["y"][0]), "debiased: the first point is not pulled towards 0"
    assert smooth["y"][-1] > raw["y"][-1], "a falling curve's average lags behind it"
    assert c["layout"]["yaxis"]["type"] == "log" and c["layout"]["hovermode"] is False  # no hover until pointed at
    page.hover("#chart-train-loss .u-over")
    page.wait_for_function("() => document.getElementById('chart-train-loss').layout.hovermode === 'x unified'")
    assert c["layout"]["xaxis"]["title"]["text"] == "tokens trained"
    assert raw["x"][:3] == [1024, 2048, 3072]  # throughput/total_tokens at steps 0, 1, 2
    assert page.get_attribute('.chart[data-metric="train/loss"] .tool.log', "aria-pressed") == "true"
    page.click("#x-mode button[value=time]")
    page.wait_for_function("() => document.getElementById('chart-train-loss').layout.xaxis.type === 'date'")
    # the URL follows the view a moment later (view.js: history.replaceState after the redraw is under way)
    page.wait_for_function("() => location.search.includes('x=time')")
    assert "smooth=0.9" in page.url
