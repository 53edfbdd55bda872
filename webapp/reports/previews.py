"""A report page's link-preview tags: its own title, summary and address over the card of the first run it cites
(runs.pagedata.preview_meta: whichever later app draws run previews fills that hook)."""

from __future__ import annotations

from html import unescape

from django.urls import reverse
from django.utils.html import strip_tags

from webapp.runs import pagedata
from webapp.public import absolute

DESCRIPTION_CHARS = 200


def meta(request, report, cited_runs: list) -> list[tuple[str, str]]:
    """(property, content) pairs for templates/runs/_preview_meta.html."""
    text = " ".join(unescape(strip_tags(report.body_html or "")).split())
    desc = text if len(text) <= DESCRIPTION_CHARS else text[:DESCRIPTION_CHARS - 1] + "…"
    base = dict(pagedata.preview_meta(request, cited_runs[0])) if cited_runs else {}
    base.update({"og:type": "article", "og:site_name": "Observatory", "og:title": report.title,
                 "og:description": desc or "A report on a live training run, with its charts.",
                 "og:url": absolute(request, reverse("report-detail", args=[report.pk]))})
    if "og:image" not in base:
        base["twitter:card"] = "summary"
    return list(base.items())
