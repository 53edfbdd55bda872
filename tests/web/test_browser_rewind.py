"""A resumed run reads as one clean line with the rewind marked: superseded points vanish, no step is doubled,
and every line chart carries a marker at the step the run went back to."""


import pytest

from observatory import contract

try:
    from tests.conftest import CHROMIUM_ARGS, chromium_path
except ImportError:  # tests/ is not a package: its conftest is importable as a top-level module
    from conftest import CHROMIUM_ARGS, chromium_path

from .servers import free_port, start_daphne, start_ingest, stop, wait_ingested, wait_port

pytestmark = [pytest.mark.browser, pytest.mark.slow]

LOSS = "document.getElementById('chart-train-loss')"


def test_a_rewind_while_watching_leaves_one_line_and_a_marker(trainer, live_env, run_id):
    if chromium_path() is None:
        pytest.skip("no Chromium installed (apt-get install -y chromium); CI installs it")
    sync_api = pytest.importorskip("playwright.sync_api")
    trainer.send("run", name="rewind test", config={})
    for step in range(30):  # the trainer published up to step 29, then crashed; its last checkpoint was step 20
        trainer.metrics(step, **{contract.M_LOSS: 3.0})
    port = free_port()
    ingest = start_ingest(live_env)
    daphne = start_daphne(port, live_env)
    try:
        wait_ingested(run_id, 29)
        wait_port(port)
        with sync_api.sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
            page = browser.new_page()
            page.goto(f"http://127.0.0.1:{port}/runs/{run_id}/")
            page.wait_for_function(f"() => {LOSS} && {LOSS}.data && {LOSS}.data[0].x.length === 30", timeout=20000)
            # The resumed trainer announces the rewind, then republishes from step 21 with different values.
            trainer.send("rewind", from_step=29, to_step=20)
            for step in range(21, 35):
                trainer.metrics(step, **{contract.M_LOSS: 2.0})
            page.wait_for_function(f"() => {LOSS}.data[0].x.includes(34)", timeout=20000)
            steps = page.evaluate(f"() => Array.from({LOSS}.data[0].x)")
            values = page.evaluate(f"() => Array.from({LOSS}.data[0].y)")
            shapes = page.evaluate(f"() => ({LOSS}.layout.shapes || []).map((s) => s.x0)")
            browser.close()
    finally:
        stop(daphne)
        stop(ingest)
    assert steps == list(range(35)), "one point per step: superseded points gone, none doubled"
    assert values[:21] == [3.0] * 21 and values[21:] == [2.0] * 14, "the points after the rewind are the new ones"
    assert shapes == [20], "the rewind is marked where the run went back to"
