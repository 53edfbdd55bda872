"""The dashboard's extension point (webapp/runs/extensions.py): order, repeat registration, the frame sender."""

from __future__ import annotations

import pytest

from webapp.live.push import send_frame
from webapp.runs import extensions


@pytest.fixture
def empty(monkeypatch):
    for name in ("HEADER", "PANELS", "SCRIPTS", "LAZY", "RUN_LIST", "PAGE_DATA", "PREVIEW_META", "_SENDER"):
        monkeypatch.setattr(extensions, name, [])
    return extensions


def test_entries_come_by_order_then_registration_and_once(empty):
    empty.add_script("js/b.js", order=20)
    empty.add_script("js/a.js", order=10)
    empty.add_script("js/c.js", order=20)
    empty.add_script("js/a.js", order=10)  # ready() may run twice
    empty.add_script("js/z.js", order=20, lazy=True)
    empty.add_script("js/y.js", order=10, lazy=True)
    empty.add_header("x/_link.html")
    empty.add_run_list("y/_part.html")
    assert empty.dashboard() == {"header": ["x/_link.html"], "panels": [], "scripts": ["js/a.js", "js/b.js", "js/c.js"],
                                 "lazy": ["js/y.js", "js/z.js"]}
    assert empty.run_list() == {"parts": ["y/_part.html"]}


def test_a_frame_goes_to_the_registered_sender_and_nowhere_without_one(empty):
    empty.send_frame("r1", {"type": "annotation"})  # no live: nothing to do, no error
    sent = []
    empty.set_sender(lambda run_id, frame: sent.append((run_id, frame)))
    empty.send_frame("r1", {"type": "annotation", "event": "upsert"})
    assert sent == [("r1", {"type": "annotation", "event": "upsert"})]


def test_the_installed_apps_fill_the_dashboard():
    """live fills the sender slot; every later app's part is registered once, in the page's order."""
    assert extensions._SENDER == [send_frame]
    page = extensions.dashboard()
    assert page["header"] == ["anomalies/_run_link.html", "control/_run_link.html", "metrics/_run_link.html",
                              "publicapi/_run_downloads.html"]
    assert page["panels"] == ["annotations/panel.html"]
    assert page["scripts"] == ["js/live.js", "js/anomalies.js", "js/interventions.js", "js/forecast.js"]
    assert page["lazy"] == ["js/annotation-thread.js", "js/annotations.js"]  # after the first paint
