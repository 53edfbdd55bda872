"""The run page's links to the reports that cite the run, and its oEmbed discovery link (a page-data contributor:
runs cannot import this app; webapp/runs/extensions.PAGE_DATA)."""

from __future__ import annotations

from webapp.reports.embed import oembed_link
from webapp.reports.models import Report

MAX_LINKS = 20


def add_page_data(request, run, page: dict) -> None:
    if run is None:
        return
    reports = Report.objects.listed().filter(runs=run).values("id", "title")[:MAX_LINKS]
    page.setdefault("links", []).extend(
        {"href": f"/reports/{r['id']}/", "text": f"report: {r['title']}", "kind": "report"} for r in reports)
    page.setdefault("alternates", []).append(
        {"type": "application/json+oembed", "href": oembed_link(request, run), "title": run.name or run.id})
