"""Embeds: one minimal live chart for other sites' iframes, and oEmbed so blog engines discover it.

    GET /embed/runs/<id>/chart/?series=train/loss&steps=A..B   the chart (the only page others may frame)
    GET /oembed?url=<a run page or an embed URL>&format=json&maxwidth=&maxheight=

The chart is static/js/minichart.js, the same component a report's chart block uses; it reads the series API
once and then follows the run on the dashboard's live path (the hub's /ws/runs/<id>/ with a one-series
subscription, or nchan's lite channel when the series is in it), so a viewer costs what a dashboard viewer does.
"""

from __future__ import annotations

from urllib.parse import urlencode, urlsplit

from django.conf import settings
from django.http import JsonResponse, QueryDict
from django.http.request import validate_host
from django.shortcuts import get_object_or_404, render
from django.urls import Resolver404, resolve, reverse
from django.utils.html import escape
from django.views.decorators.http import require_GET

from observatory import contract
from webapp.accounts.permissions import public
from webapp.api import ApiError, api_view, found, int_param
from webapp.live.relay import add_page_data as live_page_data
from webapp.reports import blocks, display
from webapp.runs.models import Run
from webapp.public import absolute

DEFAULT_SERIES = contract.M_LOSS
WIDTH, HEIGHT = 640, 360  # the iframe oEmbed offers, unless maxwidth / maxheight ask for less
MIN_SIZE = 100


def framable(response):
    """Let other sites frame this response (OBS_EMBED_FRAME_ANCESTORS); every other page keeps 'none' and DENY."""
    response._csp_replace = {"frame-ancestors": list(settings.OBS_EMBED_FRAME_ANCESTORS)}
    response.xframe_options_exempt = True
    return response


def chart_params(get) -> tuple[str, int | None, int | None]:
    """(series, start, end) of an embed's query; ApiError 400 naming what is wrong."""
    series = get.get("series") or DEFAULT_SERIES
    if not contract.METRIC_NAME_RE.match(series):
        raise ApiError(400, "series is not a series name", parameter="series")
    start, end = blocks.steps_of(get.get("steps"))
    return series, start, end


@public
@require_GET
def embed_chart(request, run_id: str):
    run = get_object_or_404(Run, pk=run_id)
    try:
        series, start, end = chart_params(request.GET)
    except ApiError as e:
        return framable(render(request, "reports/embed_error.html", {"message": e.message}, status=400))
    charts = [display.chart_spec([run.id], series, start, end)]
    page = {"charts": charts, "last_events": display.live_start(charts), "embed": True}
    live_page_data(request, run, page)
    return framable(render(request, "reports/embed_chart.html", {
        "run": run, "series": series, "page": page,
        "link": absolute(request, display.run_url(run.id, start, end, series)),
    }))


def embed_url(run_id: str, series: str, start, end) -> str:
    q = {"series": series}
    if start is not None or end is not None:
        q["steps"] = f"{'' if start is None else start}..{'' if end is None else end}"
    return reverse("embed-chart", args=[run_id]) + "?" + urlencode(q)


def _target(request, url: str):
    """(run, series, start, end) that an oEmbed `url` of this site names; ApiError 404 for anything else."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    ours = host == request.get_host().split(":")[0].lower() or validate_host(host, settings.ALLOWED_HOSTS)
    if parts.scheme not in ("http", "https") or not parts.path or not ours:
        raise ApiError(404, "url is not a page of this site that can be embedded", parameter="url")
    try:
        match = resolve(parts.path)
    except Resolver404:
        match = None
    if match is None or match.url_name not in ("run-dashboard", "embed-chart"):
        raise ApiError(404, "url is not a run page or a chart embed of this site", parameter="url")
    run = found(Run.objects.filter(pk=match.kwargs["run_id"]).first(), "no such run", parameter="url")
    q = QueryDict(parts.query)
    if match.url_name == "run-dashboard":  # the dashboard's view URL names charts by series (?chart=) and a range
        series = q.get("chart") or DEFAULT_SERIES
        lo, hi = q.get("from"), q.get("to")
        q = QueryDict(mutable=True)
        q["series"] = series
        if lo and hi and lo.isdigit() and hi.isdigit():
            q["steps"] = f"{lo}..{hi}"
    return (run, *chart_params(q))


@public
@api_view
def oembed(request):
    fmt = request.GET.get("format", "json")
    if fmt != "json":
        return JsonResponse({"error": "only format=json is served"}, status=501)
    url = request.GET.get("url", "")
    if not url or len(url) > 2000:
        raise ApiError(400, "parameter 'url' is required", parameter="url")
    run, series, start, end = _target(request, url)
    width = min(WIDTH, int_param(request, "maxwidth", WIDTH, lo=MIN_SIZE, hi=10_000))
    height = min(HEIGHT, int_param(request, "maxheight", HEIGHT, lo=MIN_SIZE, hi=10_000))
    src = absolute(request, embed_url(run.id, series, start, end))
    title = f"{run.name or run.id} · {series}"
    html = (f'<iframe src="{escape(src)}" width="{width}" height="{height}" title="{escape(title)}" '
            f'style="border:0" loading="lazy"></iframe>')
    return JsonResponse({"version": "1.0", "type": "rich", "provider_name": "Observatory",
                         "provider_url": absolute(request, "/"), "title": title, "html": html,
                         "width": width, "height": height})


def oembed_link(request, run) -> str:
    """The discovery URL for a run page (the `<link rel="alternate" type="application/json+oembed">`)."""
    page = absolute(request, reverse("run-dashboard", args=[run.id]))
    return reverse("oembed") + "?" + urlencode({"url": page, "format": "json"})
