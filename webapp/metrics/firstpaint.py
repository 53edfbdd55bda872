"""The dashboard's first windows, inlined into its page data: first paint needs no API round trip.

Without this the page asks, once its scripts have run, for the run (/api/runs/<id>/), its metric list and then
one window per default chart series: three round trips in a row, each behind the others on a busy server. Here
the page carries the metric list and, for every series a default chart draws (its metrics, the optional ones and
the per-domain ones its `extra_prefix` names), the whole-run window at INITIAL_POINTS: the same JSON that
GET /api/runs/<id>/metrics/<name>/?points=INITIAL_POINTS answers. The page uses a window when its chart asks for
no more points than that (static/js/series.js, Store.seed); a wider chart reads its own.

Computing those windows is most of the page's server time (a 1M-step series: a few thousand pyramid rows each), so
they are cached (Django's cache: Redis), each under its series' id and Series.version, which every write to the
series changes in its own transaction (storage.py): a page read after a write finds the new version and computes
anew; one read before it may be given the older window, as it would have read it from the database. A live run's
windows change with every batch; a finished, paused or busy run's are computed once for all its viewers.

A window is cached as the JSON text the page carries (compact, as the API answers), spliced into the page data as it
is (webapp/runs/pagedata.py RawJSON, script): encoding the six windows of a 1M-step run again for every view, their
17-digit floats, was ~3 of the view's ~15 ms of CPU.
"""

from __future__ import annotations

import json
import logging

from django.core.cache import cache
from redis.exceptions import RedisError

from webapp.metrics import api
from webapp.metrics.models import Series
from webapp.runs.pagedata import RawJSON

INITIAL_POINTS = 1000  # a desktop chart is ~600-900 px wide: one point per pixel (a bucket's min and max / 2 px)
MAX_INITIAL_SERIES = 24  # a run with hundreds of per-domain losses reads the rest itself
CACHE_FORMAT = 2  # part of every key: change it when series_window's answer or what is cached changes shape
CACHE_TTL_S = 3600  # (a key is never read after its series' next write; this bounds what old ones hold)
log = logging.getLogger(__name__)


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


def cache_key(series: Series) -> str:
    return f"obs:firstpaint:{CACHE_FORMAT}:{INITIAL_POINTS}:{series.id}:{series.version}"


def add_initial(request, run, page: dict) -> None:
    """Page-data contributor (webapp/runs/extensions.PAGE_DATA): `metrics` and `initial_windows`."""
    series = {s.name: s for s in Series.objects.filter(run=run).order_by("name")}  # one read for both
    page["metrics"] = [{"name": s.name, "count": s.count, "first_step": s.first_step, "last_step": s.last_step}
                       for s in series.values()]  # (api.metric_rows)
    names = [n for n in wanted(page.get("charts", []), list(series)) if n in series]
    keyed = {n: cache_key(series[n]) for n in names if series[n].version}  # (0: never written, nothing to keep)
    try:  # (the cache is an accelerator: with Redis away the page computes its windows, as before the cache)
        have = cache.get_many(list(keyed.values())) if keyed else {}
    except (RedisError, OSError) as e:
        log.warning("first-paint windows: cache unreachable (%s); computing them", e)
        have, keyed = {}, {}
    windows, fresh = {}, {}
    for n in names:
        text = windows[n] = have.get(keyed.get(n))
        if text is None:
            win = api.series_window(run, series[n], 0, api.MAX_STEP, INITIAL_POINTS)
            text = windows[n] = json.dumps(win, separators=(",", ":"))
            if n in keyed:
                fresh[keyed[n]] = text
    if fresh:
        try:
            cache.set_many(fresh, CACHE_TTL_S)
        except (RedisError, OSError) as e:
            log.warning("first-paint windows: not cached (%s)", e)
    page["initial_windows"] = RawJSON("{" + ",".join(f"{json.dumps(n)}:{text}" for n, text in windows.items()) + "}")
