"""Numbers that are true on the page: router cells that are empty say so (and downsampling never empties one),
impossible MFU is flagged rather than drawn, events read as what happened (restarts, collapsed checkpoints,
filters), a compiling run says so on its empty charts and causes no console error, and the run list follows runs
without a reload."""

import os
import time

import pytest

from observatory import contract

from ..servers import wait_ingested
from .conftest import apply, demo_messages, in_thread, seed_series

pytestmark = [pytest.mark.browser, pytest.mark.slow]

HEAT = """() => { document.getElementById('router-panel').scrollIntoView();  // (it draws once on screen)
  const d = document.getElementById('router-heatmap');
  if (!d || !d.data || !d.data.length) return null;
  const holes = d.data.find((t) => t.name === 'no data');
  return {cols: d.data[0].x.length, x: Array.from(d.data[0].x), holes: holes.z.map((r) => r.map((v) => v === 1)),
          legend: d.data.filter((t) => t.showlegend !== false && t.name).map((t) => t.name)}; }"""


def test_router_cells_are_blank_only_where_an_expert_reported_nothing(live_env, web, new_page):
    apply("holes", demo_messages("holes", hole=(0, 2, 10, 14)))
    page = new_page(viewport={"width": 1400, "height": 900})
    page.goto(web.url + "/runs/holes/")
    page.wait_for_function(f"() => {{ const h = ({HEAT})(); return h && h.cols === 60; }}", timeout=30_000)
    heat = page.evaluate(HEAT)
    missing = {(e, heat["x"][c]) for e, row in enumerate(heat["holes"]) for c, v in enumerate(row) if v}
    assert missing == {(2, s) for s in range(10, 15)}, "exactly the steps expert 2 did not report"
    assert "no data (nothing reported)" in heat["legend"]
    assert "5 cells without data" in page.inner_text("#router-note")


def test_a_long_router_history_downsampled_has_no_false_holes(live_env, web, new_page):
    from webapp.runs.models import Run

    run = Run.objects.create(id="long-moe", name="long moe", state="training", last_step=49_999)
    for e in range(4):  # 50k steps at ~300 points per expert: min/max buckets of ~330 steps
        seed_series(run, contract.router_metric(0, f"routing_hist/{e}"),
                    ((s, float(100 + e + (s * 7919) % 97)) for s in range(50_000)))
    page = new_page(viewport={"width": 1400, "height": 900})
    page.goto(web.url + "/runs/long-moe/")
    page.wait_for_function(f"() => {{ const h = ({HEAT})(); return h && h.cols > 20; }}", timeout=30_000)
    heat = page.evaluate(HEAT)
    assert not any(any(row) for row in heat["holes"]), "a bin always holds a whole history bucket"


def test_impossible_mfu_is_flagged_not_drawn_and_events_read_as_what_happened(live_env, web, new_page):
    msgs = demo_messages("mfu")
    for kind, data in msgs:  # this run knows its peak: MFU is drawn, and 310% at step 25 cannot be true
        if kind == "event" and data["name"] == "compiled":
            data["payload"].update(peak_flops=989e12, peak_flops_source="H100 dense bf16 x 1")
    apply("mfu", msgs)
    page = new_page(viewport={"width": 1400, "height": 900})
    page.goto(web.url + "/runs/mfu/")
    tput = "chart-throughput-tokens-per-second"
    page.wait_for_function(f"() => {{ const d = document.getElementById('{tput}'); return d && d.data && "
                           "d.data.length >= 6 && d.data[1].x.length > 0; }", timeout=30_000)
    mfu_line = page.evaluate(f"() => document.getElementById('{tput}').data[1]")
    flagged = page.evaluate(f"() => document.getElementById('{tput}').data[5]")  # impossible marks of trace 1
    assert mfu_line["yaxis"] == "y3" and max(mfu_line["y"]) <= 1.0 and 25 not in mfu_line["x"]
    assert flagged["x"] == [25] and flagged["text"] == ["3.1"]
    assert "1 impossible" in page.inner_text(f"#{tput} >> xpath=ancestor::figure//*[contains(@class,'note')]")

    # Events: the restart reads as a resume, routine checkpoints fold into one line, filters hide groups.
    events = page.inner_text("#events")
    assert "Resumed at step 35 (steps 36–39 are trained again)" in events
    assert "7 routine checkpoint events, steps 5–35" in events
    assert "rewind" not in events.lower() and "step 0 · starting" not in events
    page.uncheck("#event-filters input[value=checkpoint]")
    assert "routine checkpoint" not in page.inner_text("#events")
    assert page.evaluate("() => document.getElementById('chart-train-loss').layout.annotations"
                         ".some((a) => a.text === 'resumed at 35')")


def test_a_compiling_run_says_so_on_its_empty_charts_with_no_console_error_then_fills_in(trainer, servers, new_page,
                                                                                          run_id):
    trainer.send("run", name="compiling run", config={})
    trainer.send("state", state="compiling", step=0, detail="")
    trainer.send("heartbeat", phase="compiling", step=0, tokens=0, token_budget=1000, eta_s=None,
                 steps_per_s=0.0, since_step_s=0.0, pid=1)
    wait_ingested(run_id, 0)
    servers.wait_web()
    page = new_page(viewport={"width": 1400, "height": 900})
    errors, failed = [], []
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("response", lambda r: r.status >= 400 and failed.append(f"{r.status} {r.url}"))
    page.goto(f"{servers.url}/runs/{run_id}/")
    page.wait_for_function("() => document.getElementById('stat-conn').textContent === 'live'", timeout=30_000)
    # While the trainer compiles, its empty charts say so (not an unexplained blank or "waiting").
    page.wait_for_function("() => document.querySelector('.chart[data-metric=\"train/loss\"] .note')"
                           ".textContent.startsWith('compiling…')", timeout=30_000)
    for step in range(3):
        trainer.metrics(step, **{contract.M_LOSS: 4.0 - step, contract.M_LR: 1e-3})
    page.wait_for_function("() => { const d = document.getElementById('chart-train-loss'); "
                           "return d && d.data && d.data[0].x.length === 3; }", timeout=30_000)
    assert failed == [] and errors == [], (failed, errors)
    servers.stop_ingest()


def test_the_run_list_updates_without_a_reload(live_env, web, new_page):
    from webapp.runs.models import Run

    Run.objects.create(id="listed", name="demo", state="compiling", health="alive", last_step=None)
    page = new_page(viewport={"width": 1400, "height": 900})
    page.goto(web.url + "/runs/")
    page.wait_for_selector("tr[data-run=listed]")
    page.evaluate("() => { window.__sameDocument = true; }")

    def progress():
        Run.objects.filter(pk="listed").update(state="training", last_step=1234, heartbeat={
            "tokens": 750, "token_budget": 1000, "eta_s": 125.0, "steps_per_s": 2.0})
        Run.objects.create(id="newcomer", name="demo", state="starting", source="wandb")

    in_thread(progress)
    row = "tr[data-run=listed]"
    page.wait_for_function(f"() => document.querySelector('{row} .step').textContent === '1234'", timeout=20_000)
    assert page.inner_text(f"{row} .state") == "training"
    assert page.inner_text(f"{row} .pct") == "75%" and "2 min" in page.inner_text(f"{row} .eta")
    page.wait_for_selector("tr[data-run=newcomer]", timeout=20_000)
    # the row that appeared is the server's own row (one piece of code renders a row): the imported badge too
    assert page.inner_text("tr[data-run=newcomer] th .badge") == "imported"
    assert page.evaluate("() => window.__sameDocument") is True


def test_time_left_is_the_estimate_only_while_the_trainer_is_heard_from(live_env, web, new_page):
    from webapp.runs.models import Run

    hb = {"tokens": 500, "token_budget": 1000, "eta_s": 125.0, "steps_per_s": 2.0}
    Run.objects.create(id="heard", name="heard", state="training", health="alive", last_step=10, heartbeat=hb)
    Run.objects.create(id="silent", name="silent", state="training", health="lost", last_step=10, heartbeat=hb)
    Run.objects.create(id="halted", name="halted", state="stopped", health="ended", last_step=10, heartbeat=hb)
    Run.objects.create(id="done", name="done", state="stopped", health="ended", last_step=20,
                       heartbeat={**hb, "tokens": 1000, "eta_s": 0.0})
    Run.objects.create(id="crashed", name="crashed", state="failed", health="ended", last_step=10, heartbeat=hb)
    page = new_page(viewport={"width": 1400, "height": 900})
    page.goto(web.url + "/runs/")
    # the server renders every row's time left (runlist.js puts the rows it polls in place)
    page.wait_for_function("() => document.querySelector('tr[data-run=done] .eta').textContent === 'finished'",
                           timeout=20_000)
    eta = {r: page.inner_text(f"tr[data-run={r}] .eta") for r in ("heard", "silent", "halted", "done", "crashed")}
    assert eta["heard"].startswith("≈ 2 min")
    assert eta["silent"] == "–", "a lost trainer's estimate is stale"
    assert (eta["halted"], eta["done"], eta["crashed"]) == ("stopped", "finished", "failed")

    page.goto(web.url + "/runs/silent/")
    page.wait_for_function("() => document.getElementById('stat-tokens').textContent.includes('of')", timeout=20_000)
    assert page.inner_text("#stat-rate") == "–" and page.inner_text("#stat-eta") == "–"
    page.goto(web.url + "/runs/heard/")
    page.wait_for_function("() => document.getElementById('stat-rate').textContent === '2.00 steps/s'",
                           timeout=20_000)
    assert page.inner_text("#stat-eta").startswith("≈ 2 min")


FIGURE = """() => { const el = document.getElementById('stat-step'), label = el.parentNode.getBoundingClientRect();
  const box = el.getBoundingClientRect();
  return {text: el.textContent, boxed: el.classList.contains('obs-figure'), width: box.width,
          whole: el.scrollWidth <= el.clientWidth && el.scrollHeight <= el.clientHeight,
          top: box.top - label.top, bottom: label.bottom - box.bottom}; }"""


def test_the_live_step_sits_in_a_box_of_its_own_measured_size_that_holds_it_whole(trainer, servers, new_page,
                                                                                   run_id):
    """Obs.putFigure: a live figure of the header is laid out in a size-contained box measured to its text (its
    changes then lay out nothing else); a value of the same shape keeps the box, a new shape is laid out in the
    page's flow and boxed again at the next value, and the text is never clipped nor moved off its line."""
    trainer.send("run", name="figures", config={})
    trainer.send("state", state="training", step=0, detail="")
    for step in range(8):
        trainer.metrics(step, **{contract.M_LOSS: 4.0 - 0.1 * step})
    wait_ingested(run_id, 7)
    servers.wait_web()
    page = new_page(viewport={"width": 1000, "height": 700})
    page.goto(f"{servers.url}/runs/{run_id}/")
    page.wait_for_function("() => document.getElementById('stat-conn').textContent === 'live'", timeout=30_000)

    figs = {}
    for step in (8, 9, 10, 11):
        trainer.metrics(step, **{contract.M_LOSS: 4.0 - 0.1 * step})
        page.wait_for_function(f"() => document.getElementById('stat-step').textContent === '{step}'", timeout=30_000)
        figs[step] = page.evaluate(FIGURE)
    assert figs[8]["boxed"] and figs[9]["boxed"], "a value of the shape before it is boxed"
    assert figs[9]["width"] == figs[8]["width"], "a value of the same shape keeps its box"
    assert not figs[10]["boxed"], "a new shape is laid out in the page's flow"
    assert figs[11]["boxed"] and figs[11]["width"] > figs[8]["width"], "then measured again"
    for fig in figs.values():
        assert fig["whole"], f"the figure is not clipped: {fig}"
        assert fig["top"] >= 0 and fig["bottom"] >= 0, f"the box stays within its line: {fig}"
    if os.environ.get("OBS_SCREENSHOT_DIR"):  # (to look at: the header, boxed figures on their lines)
        page.locator("section.run-head").screenshot(path=os.path.join(os.environ["OBS_SCREENSHOT_DIR"], "figures.png"))


STEP_WRITES = """() => { window.__stepWrites = 0;
  new MutationObserver((records) => { window.__stepWrites += records.length; })
    .observe(document.getElementById('stat-step'), {subtree: true, childList: true, characterData: true}); }"""


def live_clock_page(trainer, servers, new_page, run_id, init_script: str = ""):
    """A run ("clock") at step 0 and its dashboard open on the live path (its init script, if any, before load)."""
    trainer.send("run", name="clock", config={})
    trainer.send("state", state="training", step=0, detail="")
    trainer.metrics(0, **{contract.M_LOSS: 4.0})
    wait_ingested(run_id, 0)
    servers.wait_web()
    page = new_page(viewport={"width": 1000, "height": 700})
    if init_script:
        page.add_init_script(init_script)
    page.goto(f"{servers.url}/runs/{run_id}/")
    page.wait_for_function("() => document.getElementById('stat-conn').textContent === 'live'", timeout=30_000)
    return page


def test_the_header_writes_the_live_step_once_a_second_and_the_newest_one_shows(trainer, servers, new_page, run_id):
    """RunHeader's clock: live steps coming faster than one a second are written to the header at most once a
    second, not at every live frame (a header text's change lays out and repaints the header and layerizes the
    page), and the newest step still shows, within the clock's second."""
    page = live_clock_page(trainer, servers, new_page, run_id)
    page.evaluate(STEP_WRITES)
    last, t0 = 30, time.monotonic()
    for step in range(1, last + 1):  # each step its own live frame: the next is sent once the chart has drawn it
        trainer.metrics(step, **{contract.M_LOSS: 4.0 - 0.01 * step})
        page.wait_for_function(f"() => Array.from(document.getElementById('chart-train-loss').data[0].x).pop() "
                               f">= {step}", timeout=30_000)
    page.wait_for_function(f"() => document.getElementById('stat-step').textContent === '{last}'", timeout=5_000)
    elapsed = time.monotonic() - t0  # (a write at its start, then one a second of the clock's at most)
    writes = page.evaluate("() => window.__stepWrites")
    assert writes <= elapsed + 2, f"{writes} writes of the step for {last} live steps in {elapsed:.1f} s"


# The header's figure writes, and how many of them came in a task that handled no live message (a live message's
# task: from the WebSocket message to the end of that task; the animation frame it asks for, drawn before the
# timer that ends it, counts as its own)
HEADER_WRITES = """
window.__head = {writes: 0, alone: 0}; let live = false;
const _WS = window.WebSocket;
window.WebSocket = function (url, protocols) {
  const ws = protocols ? new _WS(url, protocols) : new _WS(url);
  ws.addEventListener("message", () => { live = true; setTimeout(() => { live = false; }, 0); });
  return ws;
};
window.WebSocket.prototype = _WS.prototype;
Object.assign(window.WebSocket, {CONNECTING: 0, OPEN: 1, CLOSING: 2, CLOSED: 3});
addEventListener("DOMContentLoaded", () => new MutationObserver((records) => {
  window.__head.writes += records.length; if (!live) window.__head.alone += records.length;
}).observe(document.querySelector(".run-head"), {subtree: true, childList: true, characterData: true,
                                                 attributes: true}));
"""


def test_the_header_clocks_writes_go_with_a_live_updates_frame_not_one_of_their_own(trainer, servers, new_page,
                                                                                   run_id):
    """RunHeader's clock, while live updates come: a tick's figures are written with the next live update (into the
    frame its charts draw in), not in a timer task of their own (a frame of its own: style, layout, paint and the
    compositor's commit again; the live update it fell in was a live view's slowest)."""
    page = live_clock_page(trainer, servers, new_page, run_id, HEADER_WRITES)
    page.wait_for_function("() => document.getElementById('stat-step').textContent === '0'", timeout=30_000)
    page.evaluate("() => { window.__head = {writes: 0, alone: 0}; }")
    step = 0
    while page.evaluate("() => window.__head.writes") < 6:  # live steps, each once the last is drawn, until the
        step += 1                                          # clock has written its figures a few times
        assert step < 2000, "the header's figures were not written"
        trainer.metrics(step, **{contract.M_LOSS: 4.0 - 0.001 * step})
        page.wait_for_function(f"() => Array.from(document.getElementById('chart-train-loss').data[0].x).pop() "
                               f">= {step}", timeout=30_000)
    head = page.evaluate("() => window.__head")
    assert head["alone"] == 0, f"header writes in a task of their own while live updates came: {head}"
    # once the live steps stop, the clock's figures are written alone: the newest step shows
    page.wait_for_function(f"() => document.getElementById('stat-step').textContent === '{step}'", timeout=5_000)
