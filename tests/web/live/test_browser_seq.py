"""live.js's one decoder and hole check (LiveSocket.take), in Chromium on a real dashboard page: the frames of the
live log carry its number; a repeat is dropped, the frames of one entry pass together, and a hole or a "gap" frame
makes the page refetch every series it holds over HTTP (Store.reload)."""

import pytest

from observatory import contract

from ..servers import wait_ingested

pytestmark = [pytest.mark.browser, pytest.mark.slow]

TAKE = """() => {
  const reloads = [];
  const store = {all: () => [{name: "a"}, {name: "b"}], reload: (n) => reloads.push(n)};
  const sock = new Obs.LiveSocket("r", store, () => 0, () => {}, () => {});
  const seqs = (frames) => sock.take(frames).map((f) => f.type + (f.seq === undefined ? "" : ":" + f.seq));
  const out = {};
  out.first = seqs([{type: "hello"}, {type: "update", seq: 10}, {type: "anomaly", seq: 10}]);
  out.repeat = seqs([{type: "update", seq: 10}, {type: "update", seq: 11}]);
  out.reloadsBefore = reloads.length;
  out.hole = seqs([{type: "update", seq: 14}]);
  out.reloadsAfterHole = reloads.slice();
  out.gap = seqs([{type: "gap", seq: 20}, {type: "update", seq: 19}, {type: "update", seq: 21}]);
  out.reloads = reloads.length;
  return out;
}"""


def test_repeats_are_dropped_and_a_hole_or_a_gap_refetches_the_window(trainer, servers, new_page, run_id):
    trainer.send("run", name="seq test", config={})
    trainer.metrics(0, **{contract.M_LOSS: 1.0})
    wait_ingested(run_id, 0)
    servers.wait_web()
    page = new_page()
    page.goto(f"{servers.url}/runs/{run_id}/")
    page.wait_for_function("() => window.Obs && Obs.LiveSocket")
    out = page.evaluate(TAKE)
    assert out["first"] == ["hello", "update:10", "anomaly:10"]  # one entry's frames together
    assert out["repeat"] == ["update:11"]  # 10 again: a repeat
    assert out["reloadsBefore"] == 0
    assert out["hole"] == ["update:14"] and out["reloadsAfterHole"] == ["a", "b"]  # 12, 13 missing: refetch
    assert out["gap"] == ["update:21"]  # the gap refetches; 19 is older than it
    assert out["reloads"] == 4
