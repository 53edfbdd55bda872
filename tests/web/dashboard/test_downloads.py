"""Download links: each chart's menu names its own series over the steps it shows, the header's name the whole
run, and following one as an anonymous viewer returns exactly that data (CSV, JSON, Parquet)."""

import csv
import io
from urllib.parse import parse_qs, urlparse

import pytest

from observatory import contract

from .conftest import DOMAINS, apply, demo_messages

pytestmark = [pytest.mark.browser, pytest.mark.slow]

LOSS_SERIES = {contract.M_LOSS, *(contract.domain_loss(d) for d in DOMAINS)}
LINKS = """(metric) => Object.fromEntries([...document.querySelectorAll(
  `.chart[data-metric="${metric}"] details.download a[data-fmt]`)]
  .map((a) => [a.dataset.fmt, a.getAttribute('href')]))"""


def expected_loss(step: int) -> float:
    return 4.0 - 0.02 * step  # demo_messages' train/loss (its redone steps 36-39 repeat the same values)


def test_each_chart_downloads_its_series_over_the_visible_steps(live_env, web, new_page):
    apply("dl", demo_messages("dl"))
    page = new_page(viewport={"width": 1440, "height": 900})  # anonymous: no session
    errors = []
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{web.url}/runs/dl/?from=10&to=20")
    page.wait_for_function(f"""() => {{ const l = ({LINKS})('{contract.M_LOSS}');
        return l.csv && new URLSearchParams(l.csv.split('?')[1]).getAll('series').length === 3; }}""",
                           timeout=30_000)
    links = page.evaluate(f"({LINKS})('{contract.M_LOSS}')")
    assert set(links) == {"csv", "json", "parquet"}
    for fmt, href in links.items():
        url = urlparse(href)
        assert url.path == f"/api/v1/runs/dl/export.{fmt}"
        q = parse_qs(url.query)
        assert set(q["series"]) == LOSS_SERIES and (q["start"], q["end"]) == (["10"], ["20"])

    # the menu opens on a click and its links are there to follow
    summary = f'.chart[data-metric="{contract.M_LOSS}"] details.download summary'
    page.click(summary)
    assert page.is_visible(f'.chart[data-metric="{contract.M_LOSS}"] details.download a[data-fmt=csv]')
    assert "3 series, steps 10–20" in page.inner_text(f'.chart[data-metric="{contract.M_LOSS}"] .download-note')

    got = page.request.get(web.url + links["csv"])  # same browser context: as the anonymous viewer follows it
    assert got.status == 200 and got.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(got.text())))
    assert {r["series"] for r in rows} == LOSS_SERIES
    loss = {int(r["step"]): float(r["value"]) for r in rows if r["series"] == contract.M_LOSS}
    assert loss == {s: expected_loss(s) for s in range(10, 21)}

    body = page.request.get(web.url + links["json"]).json()
    assert (body["start"], body["end"], body["resolution"]) == (10, 20, "full")
    assert {s["name"]: len(s["points"]) for s in body["series"]} == {n: 11 for n in LOSS_SERIES}

    pq = pytest.importorskip("pyarrow.parquet")
    table = pq.read_table(io.BytesIO(page.request.get(web.url + links["parquet"]).body())).to_pylist()
    assert sorted((r["step"], r["value"]) for r in table if r["series"] == contract.M_LOSS) == sorted(loss.items())

    # another chart names only its own series; a new range moves every link
    lr = page.evaluate(f"({LINKS})('{contract.M_LR}')")
    assert parse_qs(urlparse(lr["csv"]).query)["series"] == [contract.M_LR]
    page.fill("#range-from", "3")
    page.fill("#range-to", "7")
    page.click("#range-form button[type=submit]")
    page.wait_for_function(f"() => ({LINKS})('{contract.M_LR}').csv.endsWith('start=3&end=7')", timeout=30_000)
    rows = list(csv.DictReader(io.StringIO(page.request.get(web.url + page.evaluate(
        f"({LINKS})('{contract.M_LR}')")["csv"]).text())))
    assert [(r["series"], int(r["step"])) for r in rows] == [(contract.M_LR, s) for s in range(3, 8)]

    # the whole run: every series, every step
    whole = page.evaluate("() => Object.fromEntries([...document.querySelectorAll('#run-downloads a')]"
                          ".map((a) => [a.dataset.fmt, a.getAttribute('href')]))")
    assert whole == {"csv": "/api/v1/runs/dl/export.csv", "json": "/api/v1/runs/dl/export.json",
                     "parquet": "/api/v1/runs/dl/export.parquet", "records": "/api/v1/runs/dl/records.json"}
    everything = list(csv.DictReader(io.StringIO(page.request.get(web.url + whole["csv"]).text())))
    names = {r["series"] for r in everything}
    assert LOSS_SERIES | {contract.M_LR, contract.M_MFU} <= names
    assert len([r for r in everything if r["series"] == contract.M_LOSS]) == 60
    assert page.request.get(web.url + whole["records"]).json()["run"]["id"] == "dl"
    assert errors == []


def test_on_a_phone_every_chart_menu_opens_inside_the_screen(live_env, web, new_page):
    apply("dl-phone", demo_messages("dl-phone"))
    page = new_page(viewport={"width": 390, "height": 844})
    page.goto(f"{web.url}/runs/dl-phone/")
    page.wait_for_function(f"() => ({LINKS})('{contract.M_LOSS}').csv", timeout=30_000)
    for metric in (contract.M_LOSS, contract.M_LR, contract.M_GRAD_NORM):
        chart = f'.chart[data-metric="{metric}"]'
        page.locator(chart).scroll_into_view_if_needed()
        page.click(f"{chart} details.download summary")
        menu = f"document.querySelector('{chart} .download-menu').getBoundingClientRect()"
        page.wait_for_function(f"() => {{ const r = {menu}; return r.width > 0 && r.left >= 0 && r.right <= 390; }}",
                               timeout=20_000)  # (placed by the menu's toggle event)
        page.click(f"{chart} h3")  # a click elsewhere closes it
        assert not page.evaluate(f"() => document.querySelector('{chart} details.download').open")
