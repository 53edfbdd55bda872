"""The operator panel's preview chart on a seeded run (no trainer): a rollback to the newest checkpoint supersedes
nothing and says so, the LR axis reads in round ticks with no float-noise tick near 0, and on a phone the mode
bar does not sit over the legend."""

from __future__ import annotations

import json
import math
import random
import time

import pytest

from observatory import contract

from ..dashboard.conftest import seed_series, web  # noqa: F401 (web: the site on the test database)
from .conftest import CONFIG
from .live import cookie_for, session

pytestmark = [pytest.mark.browser, pytest.mark.slow]
RUN, LAST = "preview-run", 159
LR_TICKS = """() => document.getElementById('op-chart').layout.yaxis3.ticklabels"""  # (plot.js: as drawn)
BOX = """(sel) => { const e = document.querySelector(sel); if (!e) return null;
  const r = e.getBoundingClientRect(); return r.width ? {x: r.x, y: r.y, w: r.width, h: r.height} : null; }"""


def overlap(a: dict, b: dict) -> bool:
    return (a["x"] < b["x"] + b["w"] and b["x"] < a["x"] + a["w"]
            and a["y"] < b["y"] + b["h"] and b["y"] < a["y"] + a["h"])


@pytest.fixture
def seeded(live_env, redis_client):
    """A training run at step 159 with checkpoints at 100 and 159, a loss and an LR that warms up then decays
    (values whose axis, synced to the loss axis, used to get a "−3.71e−20" tick)."""
    from webapp.runs.models import Run

    run = Run.objects.create(id=RUN, name=RUN, state="training", health="alive", last_step=LAST, config=CONFIG)
    rng = random.Random(7)
    seed_series(run, contract.M_LOSS, ((s, 6.3 - 1.2 * s / LAST + rng.uniform(-0.1, 0.1)) for s in range(LAST + 1)))
    seed_series(run, contract.M_LR, ((s, 3e-4 * min(1.0, (s + 1) / 12) * max(0.1, 1 - s / LAST))
                                     for s in range(LAST + 1)))
    now = time.time()
    redis_client.set(contract.heartbeat_key(RUN), json.dumps({
        "t": now, "phase": "training", "step": LAST, "tokens": 5000, "token_budget": 1_000_000, "eta_s": 600.0,
        "steps_per_s": 2.0, "since_step_s": 0.1, "pid": 1}), ex=3600)
    redis_client.set(contract.checkpoints_key(RUN), json.dumps({"t": now, "checkpoints": [
        {"step": s, "why": "periodic", "kind": "periodic", "saved_at": now, "bytes": 1000, "kept": "keep_last"}
        for s in (100, LAST)]}))
    return run


def _panel(new_page, web, viewport):  # noqa: F811
    sid = session("olga", "operator")  # (database work before Playwright's loop starts in this thread)
    page = new_page(viewport=viewport)
    page.context.add_cookies(cookie_for(web.url, sid))
    errors = []
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{web.url}/operate/?run={RUN}")
    page.wait_for_function("() => document.getElementById('op-conn').textContent === 'live'", timeout=30_000)
    page.wait_for_function("() => { const d = document.getElementById('op-chart'); return d && d.data && "
                           "d.data.some((t) => t.name === 'learning rate' && t.x.length > 100); }", timeout=30_000)
    return page, errors


def test_rollback_preview_and_lr_ticks(seeded, web, new_page):  # noqa: F811
    page, errors = _panel(new_page, web, {"width": 1280, "height": 800})
    page.click('#op-buttons button[data-cmd="rollback"]')
    page.wait_for_selector(f'#op-arg-step option[value="{LAST}"]', state="attached")
    page.select_option("#op-arg-step", str(LAST))
    page.wait_for_function(f"() => document.getElementById('op-preview').textContent.includes('step {LAST}')")
    text = page.text_content("#op-preview")
    assert "nothing is superseded" in text and "0 steps" not in text and f"{LAST + 1}–" not in text
    assert not page.evaluate("() => (document.getElementById('op-chart').layout.shapes || [])"
                             ".some((s) => s.type === 'rect')"), "no band: nothing is superseded"
    page.select_option("#op-arg-step", "100")  # an older checkpoint still shows what it abandons
    page.wait_for_function("() => (document.getElementById('op-chart').layout.shapes || [])"
                           ".some((s) => s.type === 'rect' && s.x0 === 100)", timeout=10_000)
    assert f"steps 101–{LAST} (59 steps) are superseded" in page.text_content("#op-preview")

    ticks = [float(t.replace("−", "-")) for t in page.evaluate(LR_TICKS)]
    assert len(ticks) >= 3 and ticks == sorted(ticks)
    assert all(t == 0 or abs(t) > 1e-12 for t in ticks), f"a float-noise tick: {ticks}"
    step = ticks[1] - ticks[0]
    mantissa = step / 10 ** math.floor(math.log10(step))
    assert any(math.isclose(mantissa, m, rel_tol=1e-6) for m in (1, 2, 2.5, 5)), f"not round: {ticks}"
    assert all(math.isclose(t / step, round(t / step), abs_tol=1e-6) for t in ticks), f"not round: {ticks}"
    assert errors == []


def test_on_a_phone_the_mode_bar_does_not_cover_the_legend(seeded, web, new_page):  # noqa: F811
    page, errors = _panel(new_page, web, {"width": 390, "height": 844})
    page.locator("#op-chart").scroll_into_view_if_needed()
    page.hover("#op-chart .u-over")  # the mode bar shows while the chart is hovered (a tap, on a phone)
    page.wait_for_function(f"() => ({BOX})('#op-chart .modebar')", timeout=10_000)
    bar, legend = page.evaluate(BOX, "#op-chart .modebar"), page.evaluate(BOX, "#op-chart .legend")
    assert legend and not overlap(bar, legend), (bar, legend)
    assert errors == []
