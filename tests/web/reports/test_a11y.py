"""A report with every kind of block, and an embed, at phone and desktop widths: nothing wider than the viewport,
no serious or critical axe-core violation, the charts drawn."""

from __future__ import annotations

import os

import pytest
from django.utils import timezone

from ..servers import page_errors
from ..dashboard.conftest import OVERFLOW_JS, apply, axe_violations, demo_messages, web  # noqa: F401  (fixture)

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SIZES = [(390, 844), (1400, 900)]
DRAWN = "() => [...document.querySelectorAll('.minichart')].every((c) => Number(c.dataset.points) > 0)"


@pytest.fixture
def report(live_env):
    from django.contrib.auth import get_user_model

    from webapp.annotations.models import Annotation, Reply
    from webapp.anomalies.models import Anomaly
    from webapp.reports import blocks
    from webapp.reports.models import Report

    apply("demo-a", demo_messages("demo-a"))
    apply("demo-b", demo_messages("demo-b"))
    user = get_user_model().objects.create_user("a11y-author", "a11y@example.org", "x" * 12)
    ann = Annotation.objects.create(run_id="demo-a", author=user, title="a bump", body="b", body_html="<p>b</p>",
                                    step_start=10, step_end=20)
    Reply.objects.create(annotation=ann, author=user, body="seen", body_html="<p>seen</p>")
    an = Anomaly.objects.create(run_id="demo-a", key="loss_spike train/loss 30", kind="loss_spike",
                                metric="train/loss", start_step=30, peak_step=30, detected_step=31,
                                severity="warning", score=2.0, explanation="loss 3 at step 30 is 1.5× its level")
    body = ("# Findings\n\nA *short* write-up.\n\n{{chart run=demo-a series=train/loss steps=5..}}\n"
            f"{{{{annotation id={ann.id}}}}}\n{{{{anomaly id={an.id}}}}}\n{{{{forecast run=demo-a}}}}\n"
            "{{compare runs=demo-a,demo-b series=train/loss}}\n")
    parts = blocks.parse(body)
    r = Report.objects.create(author=user, title="Findings on demo-a", body=body, parts=parts,
                              published_at=timezone.now())
    r.runs.set(blocks.cited_runs(parts))
    return r.id


@pytest.mark.parametrize("width,height", SIZES)
def test_report_and_embed_fit_and_pass_axe(report, web, new_page, width, height):
    page = new_page(viewport={"width": width, "height": height})
    errors = page_errors(page)
    for url in (f"/reports/{report}/", "/reports/", "/embed/runs/demo-a/chart/?series=train/loss"):
        page.goto(web.url + url)
        if "/reports/" != url:
            page.wait_for_function(DRAWN, timeout=30_000)
        layout = page.evaluate(OVERFLOW_JS)
        assert layout["bad"] == [] and layout["scrollWidth"] <= width, (url, layout)
        assert axe_violations(page) == [], url
        if os.environ.get("OBS_SHOTS_DIR"):
            name = url.strip("/").split("?")[0].replace("/", "-")
            page.screenshot(path=os.path.join(os.environ["OBS_SHOTS_DIR"], f"{name}-{width}.png"), full_page=True)
    assert errors == []


COLOURS = "(sel) => [...document.querySelectorAll(sel)].map((c) => (c.data || []).filter((t) => t.mode === 'lines')" \
          ".map((t) => t.line.color))"


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_a_report_colours_its_lines_as_the_dashboard_and_the_compare_page_do(report, web, new_page, scheme):
    """A report's lines were another blue than the dashboard's, and its compare block drew the second run red where
    the compare page draws it orange."""
    page = new_page(viewport={"width": 1400, "height": 900}, color_scheme=scheme)
    page.goto(f"{web.url}/reports/{report}/")
    page.wait_for_function(DRAWN, timeout=30_000)
    charts = page.evaluate(COLOURS, ".minichart")
    single, pair = charts[0], next(c for c in charts if len(c) == 2)
    page.goto(f"{web.url}/compare/?runs=demo-a,demo-b")
    compare = "#charts figure.chart[data-metric='train/loss'] .plot"
    page.wait_for_function(f"() => ({COLOURS})(\"{compare}\").some((c) => c.length >= 2)", timeout=30_000)
    assert pair == page.evaluate(COLOURS, compare)[0][:2]
    page.goto(f"{web.url}/runs/demo-a/")
    page.wait_for_function(f"() => ({COLOURS})('#chart-train-loss').some((c) => c.length >= 1)", timeout=30_000)
    assert single == page.evaluate(COLOURS, "#chart-train-loss")[0][:1]
    assert pair[0] != pair[1]


EMBED_LOOK = """() => { const c = document.querySelector('.minichart');
  const bg = getComputedStyle(document.body).backgroundColor.match(/\\d+/g).slice(0, 3).map(Number);
  const line = (c.data || []).find((t) => t.mode === 'lines');
  return {dark: bg.reduce((a, v) => a + v, 0) / 3 < 80, line: line ? line.line.color : null,
          palette: Obs.lineColor(0)}; }"""


def test_the_embed_follows_the_sites_theme(report, web, new_page):
    """Dark under a dark system preference and under the site's toggle (its choice outlives the page: localStorage),
    its line in the dashboard's palette of that theme; the embed had neither (the light palette's blue on black)."""
    embed = f"{web.url}/embed/runs/demo-a/chart/?series=train/loss"
    dark = new_page(viewport={"width": 600, "height": 300}, color_scheme="dark")
    errors = page_errors(dark)
    dark.goto(f"{web.url}/runs/demo-a/")
    dark.wait_for_function("() => !!document.querySelector('#chart-train-loss .uplot')", timeout=30_000)
    palette = dark.evaluate("() => Obs.lineColor(0)")
    dark.goto(embed)
    dark.wait_for_function(DRAWN, timeout=30_000)
    assert dark.evaluate(EMBED_LOOK) == {"dark": True, "line": palette, "palette": palette}
    assert axe_violations(dark) == []
    chosen = new_page(viewport={"width": 600, "height": 300}, color_scheme="light")
    chosen.goto(f"{web.url}/runs/demo-a/")
    chosen.click("#theme-toggle")
    chosen.wait_for_function("() => document.documentElement.dataset.theme === 'dark'")
    chosen.goto(embed)
    chosen.wait_for_function(DRAWN, timeout=30_000)
    assert chosen.evaluate(EMBED_LOOK) == {"dark": True, "line": palette, "palette": palette}
    assert errors == []
