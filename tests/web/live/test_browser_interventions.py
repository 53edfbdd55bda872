"""An operator's command shows up on an open dashboard when the run's live events say it was applied: the page
reads the interventions again on the trainer's `command` event, not on a timer (its slow poll, a minute, is only a
safety net), so a viewer sees the marker within seconds and does not ask the server every few seconds."""

import threading

import pytest

from ..servers import live_run, page_errors

pytestmark = [pytest.mark.browser, pytest.mark.slow]

# The page's timers of 10 s or more never fire (the test is over first): a poll cannot be what draws the marker.
HOLD_SLOW_TIMERS = """(() => { const every = window.setInterval; window.__held = [];
  window.setInterval = (fn, ms, ...rest) => (ms >= 10000 ? (window.__held.push(ms), -1)
                                                         : every(fn, ms, ...rest)); })()"""
SAID = ("() => ((document.getElementById('chart-train-loss').layout || {}).annotations || [])"
        ".map((a) => String(a.text) + ' ' + String(a.hovertext || '')).join(' ')")


def test_an_applied_command_is_drawn_once_its_live_event_comes(trainer, servers, new_page, run_id):
    from webapp.control.models import OperatorCommand

    step = live_run(trainer, servers, run_id, "live interventions")
    page = new_page(viewport={"width": 1400, "height": 900})
    errors = page_errors(page)
    reads = []
    page.on("request", lambda r: "/interventions/" in r.url and reads.append(r.url))
    page.add_init_script(HOLD_SLOW_TIMERS)
    page.goto(f"{servers.url}/runs/{run_id}/")
    page.wait_for_function("() => document.getElementById('stat-conn').textContent === 'live' && "
                           "performance.getEntriesByName('obs-charts-drawn').length > 0", timeout=60_000)
    assert "halve it: the norm keeps climbing" not in page.evaluate(SAID)
    assert page.evaluate("() => window.__held") == [60000], "the interventions' slow poll is held"
    first = len(reads)
    assert first >= 1, "read once at the start"
    # ... and answered before the command exists: a read still in flight (the modules start after the first paint)
    # could be answered with the command in it, and the marker then needs no read for the event
    page.wait_for_function("(n) => performance.getEntriesByType('resource').filter("
                           "(e) => e.name.includes('/interventions/')).length >= n", arg=first)

    # The trainer applies a command (its ack, as the record stands) and then says so in its events.
    # (in a thread of its own: Playwright's event loop runs in this one, where Django refuses database calls)
    write = threading.Thread(target=lambda: OperatorCommand.objects.create(
        id="live-1", run_id=run_id, name="set-lr-multiplier", args={"value": 0.5}, status="applied", step=201,
        reason="halve it: the norm keeps climbing", detail="lr multiplier 0.5 at step 201"))
    write.start()
    write.join()
    for s in (200, 201):
        step(s)
    trainer.send("event", step=201, name="command", payload={"id": "live-1", "command": "set-lr-multiplier",
                                                            "args": {"value": 0.5}, "reason": "halve it"})
    # (its poll held: only the event can have the page read it)
    page.wait_for_function(f"() => ({SAID})().includes('halve it: the norm keeps climbing')", timeout=30_000)
    assert len(reads) > first, "read again for the event"
    assert errors == []
