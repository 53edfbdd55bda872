"""The dashboard's first windows, inlined into its page data: first paint needs no API round trip.

Without this the page asks, once its scripts have run, for the run (/api/runs/<id>/), its metric list and then
one window per default chart series: three round trips in a row, each behind the others on a busy server. Here
the page carries the metric list and, for every series a default chart draws (its metrics, the optional ones and
the per-domain ones its `extra_prefix` names), the whole-run window at INITIAL_POINTS: the same JSON that
GET /api/runs/<id>/metrics/<name>/?points=INITIAL_POINTS answers. The page uses a window when its chart asks for
no more points than that (static/js/series.js, Store.seed); a wider chart reads its own.
"""

from __future__ import annotations

from webapp.metrics import api
from webapp.metrics.models import Series

INITIAL_POINTS = 1000  # a desktop chart is ~600-900 px wide: one point per pixel (a bucket's min and max / 2 px)
MAX_INITIAL_SERIES = 24  # a run with hundreds of per-domain losses reads the rest itself


def wanted(charts: list[dict], names: list[str]) -> list[str]:
    """The series, of `names` (the run's), that the default `charts` draw at first paint, in chart order."""
    have, out = set(names), []
    for spec in charts:
        for name in [*spec.get("metrics", []), *spec.get("optional", [])]:
            if name in have and name not in out:
                out.append(name)
        prefix = spec.get("extra_prefix")
        if prefix:
            out += [n for n in names if n.startswith(prefix) and len(n) > len(prefix)
                    and "/" not in n[len(prefix):] and n not in out]
    return out[:MAX_INITIAL_SERIES]


def add_initial(request, run, page: dict) -> None:
    """Page-data contributor (webapp/runs/extensions.PAGE_DATA): `metrics` and `initial_windows`."""
    rows = api.metric_rows(run)
    page["metrics"] = rows
    names = wanted(page.get("charts", []), [r["name"] for r in rows])
    series = {s.name: s for s in Series.objects.filter(run=run, name__in=names)}
    page["initial_windows"] = {n: api.series_window(run, series[n], 0, api.MAX_STEP, INITIAL_POINTS)
                               for n in names if n in series}
