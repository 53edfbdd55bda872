"""Markdown rendering and sanitising: an XSS corpus leaves no markup that runs, and the features people use render."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
from django.core.cache import cache

from webapp.annotations.markdown import ALLOWED_ATTRIBUTES, ALLOWED_TAGS, LINK_REL, clean_text, render

from .conftest import RUN, create, post

XSS = [
    "<script>alert(1)</script>",
    "<SCRIPT SRC=//evil.example/x.js></SCRIPT>",
    "<scr<script>ipt>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    "<img src=x>",
    '<img src="javascript:alert(1)">',
    "<svg onload=alert(1)>",
    "<svg><script>alert(1)</script></svg>",
    "<math><mtext><table><mglyph><style><img src=x onerror=alert(1)>",
    "<iframe src=javascript:alert(1)></iframe>",
    "<object data=javascript:alert(1)>",
    "<embed src=javascript:alert(1)>",
    "<body onload=alert(1)>",
    "<div onmouseover=alert(1)>hover</div>",
    "<a href=javascript:alert(1)>x</a>",
    '<a href="jav&#x09;ascript:alert(1)">x</a>',
    "<details open ontoggle=alert(1)>",
    "<input autofocus onfocus=alert(1)>",
    "<style>body{background:url(javascript:alert(1))}</style>",
    "<link rel=stylesheet href=//evil.example/x.css>",
    "<meta http-equiv=refresh content='0;url=javascript:alert(1)'>",
    "<base href=//evil.example/>",
    "<form action=javascript:alert(1)><button>x</button></form>",
    "<!--<script>alert(1)</script>-->",
    "<![CDATA[<script>alert(1)</script>]]>",
    "[x](javascript:alert(1))",
    "[x](JaVaScRiPt:alert(1))",
    "[x](javascript&colon;alert(1))",
    "[x](&#106;avascript:alert(1))",
    "[x](java\u0000script:alert(1))",
    "[x](  javascript:alert(1)  )",
    "[x](vbscript:msgbox(1))",
    "[x](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
    "[x](file:///etc/passwd)",
    '[x](https://ok.example "a\\" onmouseover=\\"alert(1))',
    '[x](https://ok.example" onclick="alert(1))',
    "[x][ref]\n\n[ref]: javascript:alert(1)",
    "<javascript:alert(1)>",
    "![x](javascript:alert(1))",
    "![x](https://evil.example/pixel.png)",
    '![x" onerror="alert(1)](x)',
    "[<img src=x onerror=alert(1)>](https://ok.example)",
    "**<img src=x onerror=alert(1)>**",
    "`<script>alert(1)</script>`",
    "```html\n<script>alert(1)</script>\n```",
    '```"><script>alert(1)</script>\nx\n```',
    "$<img src=x onerror=alert(1)>$",
    "$$\n</div><script>alert(1)</script>\n$$",
    "```math\n<svg onload=alert(1)>\n```",
    "#a1<script>alert(1)</script>",
    "!anomaly-1\"><script>alert(1)</script>",
    "> <script>alert(1)</script>",
    "- <img src=x onerror=alert(1)>",
    "| <script>alert(1)</script> | b |\n|---|---|\n| <img src=x onerror=alert(1)> | 2 |",
    "&lt;script&gt;alert(1)&lt;/script&gt;",
    "&#60;script&#62;alert(1)&#60;/script&#62;",
    "<a href='https://ok.example' onclick='alert(1)'>x</a>",
    "\u202etxt.exe\u202c and \u2066isolate\u2069",
    "<x onclick=alert(1)>x</x>",
    "<noscript><p title=\"</noscript><img src=x onerror=alert(1)>\">",
]


class _Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.found: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.found.append((tag, dict(attrs)))

    handle_startendtag = handle_starttag


def assert_inert(html: str) -> None:
    """Only allowed tags and attributes; links only to http(s)/mailto/relative, each with our rel."""
    p = _Tags()
    p.feed(html)
    for tag, attrs in p.found:
        assert tag in ALLOWED_TAGS, (tag, html)
        extra = set(attrs) - ALLOWED_ATTRIBUTES.get(tag, set()) - {"class", "rel"}
        assert not extra, (tag, extra, html)
        if tag == "a":
            scheme = re.match(r"^\s*([a-zA-Z][a-zA-Z0-9+.-]*):", attrs.get("href", ""))
            assert scheme is None or scheme.group(1).lower() in ("http", "https", "mailto"), html  # or relative
            assert attrs.get("rel") == LINK_REL, html
    lowered = html.lower()
    for bad in ("<script", "<img", "<svg", "<iframe", "<style", "<object", "<embed", "<form", "<input"):
        assert bad not in lowered, html  # as text they read "&lt;script": escaped
    assert "\u202e" not in html and "\u2066" not in html


@pytest.mark.parametrize("payload", XSS)
def test_nothing_in_the_xss_corpus_survives_as_markup(payload):
    html = render(payload, {"annotation": {1: "/runs/r/?annotation=1"}, "anomaly": {1: "/runs/r/?anomaly=1"}})
    assert_inert(html)
    for tag, attrs in _parsed(html):
        for value in attrs.values():
            assert "javascript:" not in (value or "").lower().replace("\t", ""), html


def _parsed(html):
    p = _Tags()
    p.feed(html)
    return p.found


def test_the_corpus_is_large_enough():
    assert len(XSS) >= 50


@pytest.mark.django_db
def test_payloads_through_the_api_are_stored_sanitised(run, personas):
    for payload in XSS:
        cache.clear()  # the posting rate limit is tested in test_api; here every payload goes in
        resp = create(personas["member"], title=payload[:200], body=payload)
        assert resp.status_code == 201, resp.content
        assert_inert(resp.json()["body_html"])
        # the title is text (the page sets it with textContent), cleaned of control and bidi characters
        assert resp.json()["title"] == " ".join(clean_text(payload[:200]).split())
    a = create(personas["member"]).json()
    r = post(personas["member"], f"/api/annotations/{a['id']}/replies/", {"body": XSS[3]}).json()
    assert r["body_html"] == "<p>&lt;img src=x onerror=alert(1)&gt;</p>\n"


def test_markdown_features_render():
    html = render("# Title\n\n**bold** _em_ ~~gone~~ `code` [site](https://example.org)\n\n"
                  "> quoted\n\n1. one\n2. two\n\n```python\nx = 1 < 2\n```\n\n| a | b |\n|---|---|\n| 1 | 2 |\n")
    for part in ("<h1>Title</h1>", "<strong>bold</strong>", "<em>em</em>", "<s>gone</s>", "<code>code</code>",
                 f'<a href="https://example.org" rel="{LINK_REL}">site</a>', "<blockquote>", "<ol>",
                 '<pre><code data-lang="python">x = 1 &lt; 2\n</code></pre>', "<table>", "<td>1</td>"):
        assert part in html, (part, html)


def test_math_is_kept_as_readable_text():
    html = render("inline $\\alpha^2 + \\beta$ and $$\\sum_i x_i$$, prices $5 and $6\n\n$$\nE = mc^2\n$$\n\n"
                  "```math\n\\frac{a}{b}\n```")
    assert '<span class="math">$\\alpha^2 + \\beta$</span>' in html
    assert '<span class="math">$$\\sum_i x_i$$</span>' in html
    assert "prices $5 and $6" in html  # not math
    assert '<div class="math-block">E = mc^2</div>' in html and '<div class="math-block">\\frac{a}{b}</div>' in html


def test_references_become_links_only_when_they_resolve():
    refs = {"annotation": {12: "/runs/r/?annotation=12"}, "anomaly": {4: "/runs/r/?anomaly=4"}}
    html = render("see #a12, !anomaly-4, #a99, x#a12 and `#a12`", refs)
    assert (f'<a href="/runs/r/?annotation=12" class="ref ref-annotation" data-annotation="12" rel="{LINK_REL}">'
            "#a12</a>") in html
    assert 'data-anomaly="4"' in html and "#a99" in html and "x#a12" in html and "<code>#a12</code>" in html
    assert html.count("<a ") == 2


@pytest.mark.django_db
def test_references_resolve_to_public_annotations_and_anomalies_of_any_run(run, personas):
    from webapp.anomalies.models import Anomaly

    first = create(personas["member"], title="first").json()
    hidden = create(personas["member"], title="hidden").json()
    post(personas["moderator"], f"/api/annotations/{hidden['id']}/moderation/", {"action": "hide", "reason": "x"})
    anomaly = Anomaly.objects.create(run_id=RUN, key="spike loss 5", kind="spike", metric="train/loss",
                                     start_step=5, peak_step=5, detected_step=6, severity="warning", score=3.0,
                                     explanation="x")
    body = f"like #a{first['id']} (not #a{hidden['id']}), caused !anomaly-{anomaly.id}"
    html = create(personas["member"], body=body).json()["body_html"]
    assert f'href="/runs/{RUN}/?annotation={first["id"]}"' in html
    assert f'href="/runs/{RUN}/?anomaly={anomaly.id}"' in html
    assert f"(not #a{hidden['id']})" in html
