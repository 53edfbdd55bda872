"""New anomalies while a dashboard is open are told in one notice that keeps count, not one notice each: a run
that trips detectors again and again (an anomaly storm) keeps one notice up to date instead of stacking them over
the page (each a new element laid out and painted, and one more frame later to take it away)."""

import os
import re

import pytest

from observatory import contract

from . import curves
from ..servers import get_json, page_errors, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_new_anomalies_are_one_notice_that_counts_them(trainer, servers, new_page, run_id):
    data = curves.rows(curves.SPIKES[1] + 40)  # critical loss spikes at SPIKES, a non-finite loss at NAN_AT
    curves.started(trainer, servers, "anomaly notice", data[:5])
    page = new_page(viewport={"width": 1000, "height": 700})
    errors = page_errors(page)
    page.goto(f"{servers.url}/runs/{run_id}/")
    page.wait_for_function("() => document.getElementById('stat-conn').textContent === 'live'", timeout=30_000)

    # The first spike: a notice of its own.
    first = min(curves.SPIKES) + 20
    curves.publish(trainer, data[5:first])
    notices = page.locator("#toasts .toast")
    notices.filter(has_text="loss spike").first.wait_for(timeout=30_000)
    page.evaluate("() => { document.querySelector('#toasts .toast').dataset.probe = 'first'; }")

    # Then the non-finite loss and the second spike, in later frames: the same notice, rewritten with its count.
    curves.publish(trainer, data[first:])
    api = f"{servers.url}/api/runs/{run_id}/anomalies/"

    def spikes():
        return [a for a in (get_json(api) or {}).get("anomalies", [])
                if a["kind"] == "loss_spike" and a["metric"] == contract.M_LOSS]

    wait_for(lambda: len(spikes()) == 2, 60, "both loss spikes in the log")
    last = max(curves.SPIKES)
    # the page has taken the last one (its frame told the notice too): its mark is on the loss chart
    page.wait_for_function(f"() => (document.getElementById('chart-train-loss').layout.shapes || [])"
                           f".some((s) => s.x0 === {last})", timeout=30_000)

    assert notices.count() == 1, "one notice for all of them"
    assert notices.first.get_attribute("data-probe") == "first", "the first one's, kept up to date"
    text = notices.first.inner_text()
    told = re.match(r"(\d+) new anomalies since step (\d+) \(([^)]*)\)\. Critical: ", text)
    assert told, text
    assert int(told[1]) >= 3, "the two spikes and the non-finite loss at least"
    assert int(told[2]) <= min(curves.SPIKES)
    assert re.search(r"(^|, )loss spike ×\d+", told[3]), "counted by kind"
    assert "toast-critical" in notices.first.get_attribute("class")
    # The notices' column is a box of the viewport's height (laid out on its own: observatory.css): the notice sits
    # at its foot, inside the viewport, whole, and a click on the column's empty part reaches the page under it.
    for width, height in ((1000, 700), (390, 844)):
        page.set_viewport_size({"width": width, "height": height})
        box = page.evaluate("""() => {
          const col = document.getElementById('toasts').getBoundingClientRect();
          const t = document.querySelector('#toasts .toast'), r = t.getBoundingClientRect();
          const under = document.elementFromPoint(col.left + col.width / 2, col.top + 20);
          return {left: r.left, right: r.right, top: r.top, bottom: r.bottom, whole: t.scrollWidth <= t.clientWidth,
                  colBottom: col.bottom, under: under && (under.closest('#toasts') ? 'toasts' : 'page')};
        }""")
        assert 0 <= box["left"] and box["right"] <= width and 0 <= box["top"] and box["bottom"] <= height, box
        assert box["whole"] and box["colBottom"] - box["bottom"] < 20, box
        assert box["under"] == "page", box
    page.set_viewport_size({"width": 1000, "height": 700})
    assert errors == []
    if os.environ.get("OBS_SCREENSHOT_DIR"):  # (to look at: the notice over the page, desktop and phone)
        page.screenshot(path=os.path.join(os.environ["OBS_SCREENSHOT_DIR"], "anomaly-notice.png"))
        page.set_viewport_size({"width": 390, "height": 844})
        page.screenshot(path=os.path.join(os.environ["OBS_SCREENSHOT_DIR"], "anomaly-notice-phone.png"))
