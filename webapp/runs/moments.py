"""Notable moments across runs (the front page's "what is happening"): a registry that later apps fill.

This app names none of them (django.contrib.admin's pattern): an app that has moments to tell registers a source
in its AppConfig.ready(). A source is `fn(limit: int) -> list[Moment]`, newest first, public content only:
  {"kind": "anomaly" | "annotation" | "intervention" | ..., "id": str (unique within its kind),
   "run_id": str, "run_name": str, "step": int, "from": int, "to": int (the chart's window around it),
   "title": str, "detail": str, "count": int | None (a discussion's replies), "t": ISO time, "url": str,
   optional: "n": int (anomalies folded into this one moment), "rank": 0 | 1 (1: context, shown below the rest)}
`url` opens the run's chart at that step (the dashboard's ?from=&to= view, static/js/view.js).
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)

MOMENT_SOURCES: list = []


def register(source) -> None:
    """Add a moment source once (AppConfig.ready() may run twice)."""
    if source not in MOMENT_SOURCES:
        MOMENT_SOURCES.append(source)


def latest(limit: int = 20) -> list[dict]:
    """The `limit` moments a visitor should see first, across every source. A failing source is left out, logged:
    the front page must not fail for one app's bug.

    Every source keeps a share of the slots (limit / sources, at least 2) of its first, so that one busy source (a
    storm of anomalies) cannot push annotations and operator actions out; the slots left go to the first of the
    rest. Shown in order of `rank` (0, the default: what matters; 1: context, such as info anomalies and host
    notices), newest first within a rank."""
    lists: list[list[dict]] = []
    for source in MOMENT_SOURCES:
        try:
            got = _ordered(source(limit))
        except Exception:  # noqa: BLE001 — logged with its traceback, never shown to the visitor
            log.exception("moment source %r failed", getattr(source, "__name__", source))
            continue
        if got:
            lists.append(got)
    share = max(2, limit // max(1, len(lists)))
    chosen = _ordered(m for got in lists for m in got[:share])[:limit]
    rest = _ordered(m for got in lists for m in got[share:])
    return _ordered(chosen + rest[:limit - len(chosen)])


def _ordered(moments) -> list[dict]:
    """By rank (0 first), newest first within a rank (ISO times sort as text; one without a time goes last)."""
    out = sorted(moments, key=lambda m: m.get("t") or "", reverse=True)
    out.sort(key=lambda m: m.get("rank", 0))
    return out
