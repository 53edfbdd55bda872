"""Lines on steps of their own joined onto one x for uPlot (static/js/livedraw.js, Obs.joinLines): a figure's lines
that only grew by live points on the same new steps extend the last join by those rows; whatever they grew by, the
join is uPlot.join's (a line's y null where it has no point), as the full redraw draws it."""

import pytest

from ..servers import ROOT

pytestmark = [pytest.mark.browser]


def test_the_join_of_growing_lines_is_uplots_join_at_every_step(new_page):
    page = new_page()
    page.set_content("<!doctype html><title>join</title>")
    page.add_script_tag(path=str(ROOT / "static" / "vendor" / "uPlot.iife.min.js"))
    page.add_script_tag(path=str(ROOT / "static" / "js" / "livedraw.js"))
    got = page.evaluate("""() => {
      let seed = 11; const rnd = () => (seed = (seed * 16807) % 2147483647) / 2147483647;
      const bufs = [0, 1, 2].map(() => ({x: new Float64Array(8), y: new Float64Array(8), n: 0}));
      const push = (b, x, y) => { // (a LiveBuffer's doubling: a new memory, the old one's points copied)
        if (b.n === b.x.length) {
          const X = new Float64Array(b.n * 2), Y = new Float64Array(b.n * 2); X.set(b.x); Y.set(b.y); b.x = X; b.y = Y;
        }
        b.x[b.n] = x; b.y[b.n] = y; b.n++;
      };
      // downsampled history: each line on steps of its own
      for (let s = 0; s < 300; s++) bufs.forEach((b, k) => { if (rnd() < 0.4) push(b, s, rnd() + k); });
      const lines = bufs.map(() => ({}));
      const view = () => bufs.forEach((b, k) => {
        lines[k].x = b.x.subarray(0, b.n); lines[k].y = b.y.subarray(0, b.n);
      });
      const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
      const out = {steps: 0, equal: 0};
      for (let s = 300; s < 400; s++) {
        // live points on the same steps (now and then one line alone: on a step of its own)
        if (s % 17 === 0) push(bufs[1], s + 0.5, 9); else bufs.forEach((b, k) => push(b, s, rnd() + k));
        if (s % 3) continue; // (joined at some steps only: a tail drawn between)
        view();
        out.steps++;
        if (same(Obs.joinLines(lines), uPlot.join(lines.map((t) => [t.x, t.y])))) out.equal++;
      }
      return out;
    }""")
    assert got["steps"] > 30 and got["equal"] == got["steps"], got
