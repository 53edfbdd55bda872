"""The site's icon: every page names it, and /favicon.ico (what browsers ask for when a page names none, as the
admin's pages do) answers with it instead of a 404."""

import re

import pytest

pytestmark = pytest.mark.django_db

ICON_LINK = re.compile(r'<link rel="icon" href="([^"]+)"')


def _body(resp) -> bytes:
    return b"".join(resp.streaming_content) if resp.streaming else resp.content


def test_favicon_ico_at_the_root_is_an_icon_not_a_404(client):
    resp = client.get("/favicon.ico", follow=True)
    assert resp.status_code == 200
    assert resp.redirect_chain and resp.redirect_chain[-1][0].startswith("/static/")
    body = _body(resp)
    assert body[:4] == b"\x00\x00\x01\x00" and len(body) < 10_000  # an ICO header; small


@pytest.mark.parametrize("url", ["/", "/accounts/login/", "/accounts/signup/", "/compare/", "/api/docs/"])
def test_every_page_names_an_icon_that_is_served(client, url):
    html = client.get(url).content.decode()
    (href,) = ICON_LINK.findall(html)
    assert href.startswith("/static/")
    icon = client.get(href)
    assert icon.status_code == 200 and icon["Content-Type"] == "image/svg+xml"
    assert b"<svg" in _body(icon)
