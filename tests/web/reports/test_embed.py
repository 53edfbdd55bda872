"""Embeds: only /embed/ may be framed by other sites (CSP frame-ancestors, no X-Frame-Options), every other page
refuses; oEmbed answers for run pages and embed URLs of this site and is discoverable from the run page."""

from __future__ import annotations

import html
import re

import pytest

from .conftest import RUN


def _ancestors(resp) -> str:
    return re.search(r"frame-ancestors ([^;]*)", resp["Content-Security-Policy"]).group(1).strip()


def test_only_the_embed_may_be_framed_by_other_sites(world, client):
    embed = client.get(f"/embed/runs/{RUN}/chart/?series=train/loss&steps=10..200")
    assert embed.status_code == 200
    assert _ancestors(embed) == "*" and "X-Frame-Options" not in embed
    assert "script-src 'self'" in embed["Content-Security-Policy"]  # the rest of the policy stays
    for url in (f"/runs/{RUN}/", "/reports/", "/", f"/embed/runs/{RUN}/chart/?steps=bad"):
        resp = client.get(url)
        if url.startswith("/embed/"):  # a refused embed is still a page meant for the frame: it says why there
            assert resp.status_code == 400 and "steps must be" in resp.content.decode()
            continue
        assert _ancestors(resp) == "'none'" and resp["X-Frame-Options"] == "DENY", url


def test_who_may_frame_the_embed_is_configurable(world, client, settings):
    settings.OBS_EMBED_FRAME_ANCESTORS = ["https://blog.example.org"]
    assert _ancestors(client.get(f"/embed/runs/{RUN}/chart/")) == "https://blog.example.org"


def test_the_embed_names_its_chart_and_refuses_bad_input_plainly(world, client):
    page = client.get(f"/embed/runs/{RUN}/chart/?series=train/loss&steps=10..").content.decode()
    assert '"charts": [{"runs": ["rep-run"], "series": "train/loss", "start": 10, "end": null}]' in page
    assert "plotly" not in page and "<script>" not in page  # the small vendored chart only, no inline script
    assert client.get("/embed/runs/no-such-run/chart/").status_code == 404
    bad = client.get(f"/embed/runs/{RUN}/chart/?series=<b>x</b>")
    assert bad.status_code == 400 and "<b>x" not in bad.content.decode()
    for text in (bad.content.decode(), page):
        assert "Traceback" not in text and "/work/" not in text and "/home/" not in text


def test_oembed_answers_for_run_pages_and_embeds_of_this_site(world, client):
    resp = client.get("/oembed", {"url": f"http://testserver/runs/{RUN}/?chart=train/loss&from=100&to=300",
                                  "format": "json", "maxwidth": 400})
    assert resp.status_code == 200
    data = resp.json()
    assert data["version"] == "1.0" and data["type"] == "rich" and data["width"] == 400
    src = html.unescape(re.search(r'src="([^"]+)"', data["html"]).group(1))
    assert src == f"http://testserver/embed/runs/{RUN}/chart/?series=train%2Floss&steps=100..300"
    again = client.get("/oembed", {"url": src}).json()
    assert again["html"] == data["html"].replace('width="400"', 'width="640"')
    assert client.get("/oembed", {"url": "http://testserver/reports/"}).status_code == 404
    assert client.get("/oembed", {"url": f"https://elsewhere.example/runs/{RUN}/"}).status_code == 404
    assert client.get("/oembed", {"url": "http://testserver/runs/nope/"}).status_code == 404
    assert client.get("/oembed", {"url": f"http://testserver/runs/{RUN}/", "format": "xml"}).status_code == 501
    assert client.get("/oembed").status_code == 400


def test_the_run_page_carries_the_oembed_discovery_link(world, client):
    page = client.get(f"/runs/{RUN}/").content.decode()
    link = re.search(r'<link rel="alternate" type="application/json\+oembed" href="([^"]+)"', page)
    assert link
    assert client.get(html.unescape(link.group(1))).json()["type"] == "rich"


@pytest.mark.parametrize("path", ["/reports/", "/reports/new/"])
def test_report_pages_refuse_to_be_framed(world, personas, path):
    resp = personas["member"].get(path)
    assert resp.status_code == 200 and _ancestors(resp) == "'none'" and resp["X-Frame-Options"] == "DENY"
