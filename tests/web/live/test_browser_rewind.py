"""A resumed run reads as one clean line with the rewind marked: superseded points vanish, no step is doubled,
and every line chart carries a marker at the step the run went back to."""

import pytest

from observatory import contract

from ..servers import trace_js, wait_ingested, wait_trace

pytestmark = [pytest.mark.browser, pytest.mark.slow]

LOSS = "chart-train-loss"


def test_a_rewind_while_watching_leaves_one_line_and_a_marker(trainer, servers, new_page, run_id):
    trainer.send("run", name="rewind test", config={})
    for step in range(30):  # the trainer published up to step 29, then crashed; its last checkpoint was step 20
        trainer.metrics(step, **{contract.M_LOSS: 3.0})
    wait_ingested(run_id, 29)
    servers.wait_web()
    page = new_page()
    page.goto(f"{servers.url}/runs/{run_id}/")
    wait_trace(page, LOSS, "x.length === 30")
    # The resumed trainer announces the rewind, then republishes from step 21 with different values.
    trainer.send("rewind", from_step=29, to_step=20)
    for step in range(21, 35):
        trainer.metrics(step, **{contract.M_LOSS: 2.0})
    wait_trace(page, LOSS, "x.includes(34)")
    steps = page.evaluate(trace_js(LOSS))
    values = page.evaluate(trace_js(LOSS, "y"))
    assert steps == list(range(35)), "one point per step: superseded points gone, none doubled"
    assert values[:21] == [3.0] * 21 and values[21:] == [2.0] * 14, "the points after the rewind are the new ones"
    # The marker comes with the rewind's event, which can be drawn a frame after the redone points (a busy CPU):
    # wait for a marker, then it must be the one at the step the run went back to.
    shapes = f"(document.getElementById({LOSS!r}).layout.shapes || []).map((s) => s.x0)"
    page.wait_for_function(f"() => {shapes}.length > 0")
    assert page.evaluate(f"() => {shapes}") == [20], "the rewind is marked where the run went back to"
