"""Pages: the run list and a run's live dashboard (data comes from the JSON API and the WebSocket)."""

import time

from django.db.models import Min
from django.http import HttpResponseBadRequest
from django.shortcuts import get_object_or_404, render
from django.templatetags.static import static
from django.views.decorators.http import require_GET

from observatory import contract
from webapp.accounts.permissions import public
from webapp.fragments import fragment
from webapp.runs import api, extensions, forecast, pagedata
from webapp.runs.models import Run

LIST_LIMIT = 500
LIST_POLL_S = 5  # the run list asks for its rows (/runs/?part=rows) this often
ROWS_MAX = 100  # /runs/?rows=a,b: at most this many rows per request


@public
@require_GET
def run_list(request):
    """The run table; `?part=rows` answers the table's rows alone (static/js/runlist.js polls it: a fragment with
    an ETag, 304 while nothing changed), `?rows=a,b` only those runs' rows (templates/runs/_run_row.html, the one
    piece of code that renders a row)."""
    if request.GET.get("part") == "rows":
        return fragment(request, "runs/_run_rows.html", {"rows": _rows(Run.objects.for_list(), LIST_LIMIT)})
    wanted = request.GET.get("rows")
    if wanted is not None:
        ids = [i for i in wanted.split(",") if i]
        if not ids or len(ids) > ROWS_MAX or not all(contract.RUN_ID_RE.match(i) for i in ids):
            return HttpResponseBadRequest(f"rows: 1-{ROWS_MAX} run ids, comma-separated ({contract.RUN_ID_RULE})",
                                          content_type="text/plain")
        runs = Run.objects.for_list().filter(pk__in=ids)
        return render(request, "runs/_run_rows.html", {"rows": _rows(runs, ROWS_MAX)})
    return render(request, "runs/run_list.html", {"rows": _rows(Run.objects.for_list(), LIST_LIMIT),
                                                  "extensions": extensions.run_list(),
                                                  "page": {"poll_s": LIST_POLL_S}})


def _rows(runs, limit: int) -> list[dict]:
    rows = []
    # "Started" is the first start: a restart must not move it
    for r in runs.annotate(first_event_t=Min("events__t"))[:limit]:
        started = min((t for t in (r.started_at, r.first_event_t) if t is not None), default=None)
        prog = pagedata.progress(r)
        rows.append({"run": r, "started": started, "progress": prog, "time_left": pagedata.time_left(r, prog)})
    return rows


# The dashboard's scripts before its first paint, in order (templates/runs/dashboard.html): the bundle of all but
# dashboard.js (webapp/runs/bundle.py), then dashboard.js
FIRST_SCRIPTS = ("js/dashboard-bundle.js", "js/dashboard.js")


@public
@require_GET
def dashboard(request, run_id: str):
    t0 = time.perf_counter()
    run = get_object_or_404(Run, pk=run_id)
    peak = pagedata.peak_info(run)
    has_forecast = forecast.published(run.id)
    names = set(run.series.values_list("name", flat=True))
    page = {"run_id": run.id, "default_metrics": list(contract.DEFAULT_DASHBOARD_METRICS),
            "heartbeat_ttl_s": contract.HEARTBEAT_TTL_S,
            "charts": pagedata.charts(peak, names, has_forecast),
            "peak": peak, "bounds": pagedata.bounds(peak),
            "registry": contract.registry(),
            "time_anchors": pagedata.time_anchors(run), "rewinds": pagedata.rewinds(run),
            "tokens_metric": contract.M_TOTAL_TOKENS,
            "forecast": has_forecast,  # static/js/forecast.js reads /api/runs/<id>/forecast/
            # the verified band over steps for first paint, as the front page has it (None: none, or unverified)
            "forecast_band": forecast.band_over_steps(run, forecast.latest(run.id)) if has_forecast else None,
            "loss_metrics": {"train": contract.M_LOSS, "eval": contract.M_EVAL_LOSS},  # where forecast.js draws it
            # "train/router/layer_{layer}/{name}"; expert e of routing_hist is "<...>/routing_hist/{e}"
            "router_metric": contract.ROUTER_METRIC,
            "mixture": {"stage": contract.M_MIX_STAGE, "weight_prefix": contract.mixture_weight("")},
            # what the page would otherwise ask /api/runs/<id>/ for first: one round trip less to first paint
            "detail": api.detail_payload(request, run)}
    timing = [("data", time.perf_counter() - t0)]  # the page's own data; then each app's, then the template
    for extra in extensions.PAGE_DATA:  # later apps' keys (runs.extensions)
        t = time.perf_counter()
        extra(request, run, page)
        timing.append((f"{extra.__module__.rsplit('.', 1)[-1]}.{extra.__name__}", time.perf_counter() - t))
    t = time.perf_counter()
    resp = render(request, "runs/dashboard.html", {
        "run": run,
        "started": pagedata.first_started(run),
        "progress": pagedata.progress(run), "glossary": contract.GLOSSARY,
        "page": page, "page_script": pagedata.script(page),
        "preview_meta": pagedata.preview_meta(request, run), "facts": pagedata.facts(page["detail"]),
        "extensions": extensions.dashboard(), "first_scripts": FIRST_SCRIPTS,
    })
    timing.append(("template", time.perf_counter() - t))
    # The scripts asked for as the answer's head arrives, before the page is parsed (its preload scanner asked for
    # them after the renderer had set up the new document: ~40 ms after the first byte)
    resp["Link"] = ", ".join(f"<{static(path)}>; rel=preload; as=script; fetchpriority=high" for path in FIRST_SCRIPTS)
    # Where the server's time before the first byte went (the browser shows it; bench/dashboard.py reads it)
    resp["Server-Timing"] = ", ".join(f"{name};dur={s * 1000:.1f}" for name, s in timing)
    return resp
