"""The run dashboard's one extension point, and the slot for live's frame sender.

runs names no later app: each app after it in the web chain adds its header links, panels, scripts and page data
from its own AppConfig.ready() (templates and static files of its own, tests/test_architecture.py); live fills
`send_frame` so that apps before it push frames without knowing the channel layer. docs/ARCHITECTURE.md.
"""

from __future__ import annotations

import logging

log = logging.getLogger("observatory.runs")

# (order, item): lower order first, then registration order. Items: template names (header, panels), static paths
# (scripts), callables (page_data: fn(request, run, page) adds keys; preview_meta: fn(request, run) -> dict|None).
HEADER: list[tuple[int, str]] = []  # included in the run head's link row, with the page's context
PANELS: list[tuple[int, str]] = []  # included above the charts
SCRIPTS: list[tuple[int, str]] = []  # loaded after the dashboard's own scripts, before dashboard.js
LAZY: list[tuple[int, str]] = []  # scripts not needed for the first paint: dashboard.js loads them after it
RUN_LIST: list[tuple[int, str]] = []  # the run list page: included above the table
PAGE_DATA: list = []  # contributions to the page's JSON data, called in order
PREVIEW_META: list = []  # link-preview tags (Open Graph / Twitter card); the first answer wins
_SENDER: list = []  # live's send(run_id, frame): at most one


def _add(entries: list, item, order: int) -> None:
    if all(i != item for _, i in entries):  # AppConfig.ready() may run twice
        entries.append((order, item))


def add_header(template: str, order: int = 50) -> None:
    _add(HEADER, template, order)


def add_panel(template: str, order: int = 50) -> None:
    _add(PANELS, template, order)


def add_script(path: str, order: int = 50, lazy: bool = False) -> None:
    """A script of the dashboard's; `lazy`: loaded (in order) once the charts have painted, its Obs.onStart
    functions then run (the page parses less before its first paint)."""
    _add(LAZY if lazy else SCRIPTS, path, order)


def add_run_list(template: str, order: int = 50) -> None:
    _add(RUN_LIST, template, order)


def add_page_data(fn) -> None:
    if fn not in PAGE_DATA:
        PAGE_DATA.append(fn)


def add_preview_meta(fn) -> None:
    if fn not in PREVIEW_META:
        PREVIEW_META.append(fn)


def _sorted(entries: list) -> list:
    return [item for _, item in sorted(entries, key=lambda e: e[0])]  # sort is stable: ties keep their order


def dashboard() -> dict:
    """What the dashboard template renders: {"header": [...], "panels": [...], "scripts": [...], "lazy": [...]}."""
    return {"header": _sorted(HEADER), "panels": _sorted(PANELS), "scripts": _sorted(SCRIPTS), "lazy": _sorted(LAZY)}


def run_list() -> dict:
    """What the run list template renders: {"parts": [...]}."""
    return {"parts": _sorted(RUN_LIST)}


def set_sender(fn) -> None:
    """live's frame sender (webapp.live.push.send_frame); a second call replaces the first."""
    _SENDER[:] = [fn]


def send_frame(run_id: str, frame: dict) -> None:
    """A frame (its "type" names it, webapp/live/protocol.py) to every open page of the run, through live. Without
    live installed there is no one to tell: nothing is sent."""
    if _SENDER:
        _SENDER[0](run_id, frame)
    else:
        log.debug("no live sender: %s frame for %s not pushed", frame.get("type"), run_id)
