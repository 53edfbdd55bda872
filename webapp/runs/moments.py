"""Notable moments across runs (the front page's "what is happening"): a registry that later apps fill.

This app names none of them (django.contrib.admin's pattern): an app that has moments to tell registers a source
in its AppConfig.ready(). A source is `fn(limit: int) -> list[Moment]`, newest first, public content only:
  {"kind": "anomaly" | "annotation" | "intervention" | ..., "id": str (unique within its kind),
   "run_id": str, "run_name": str, "step": int, "from": int, "to": int (the chart's window around it),
   "title": str, "detail": str, "count": int | None (a discussion's replies), "t": ISO time, "url": str}
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
    """The newest `limit` moments of every source together, newest first. A failing source is left out, logged:
    the front page must not fail for one app's bug."""
    out: list[dict] = []
    for source in MOMENT_SOURCES:
        try:
            out.extend(source(limit))
        except Exception:  # noqa: BLE001 — logged with its traceback, never shown to the visitor
            log.exception("moment source %r failed", getattr(source, "__name__", source))
    out.sort(key=lambda m: m.get("t") or "", reverse=True)
    return out[:limit]
