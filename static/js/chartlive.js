// A line chart's live append path (a part of Obs.LineChart, as zoom.js and chartmarks.js). After a full redraw the
// drawn lines are copied into typed-array buffers (Obs.LiveBuffer); a live point is appended there (no allocation
// a point). Where the scales drawn hold the new points only the new segments are drawn (changed marks placed again)
// (Obs.drawTail, livedraw.js: the common live step); else the same figure is redrawn from views of those buffers
// (Obs.redrawData: uPlot's setData; no new figure, legend, tool bar or labels; changed marks are made again on the
// same layout). The x axis keeps the range drawn while ROOM_MIN of it is left past the data, then room ahead
// again (headroom).
// Lines may sit on steps of their own (downsampled history: each keeps its buckets' extremes) while their live
// points come on the same steps. A chart that draws more than its lines' own points (zoomed, smoothed, feature
// lines, impossible values, non-finite marks, a line whose newest point is on another step) or whose drawn points
// would pass 4 a pixel takes the full redraw instead (which cuts a rewind and downsamples again: Obs.minmax).
"use strict";

(function (Obs) {
  const MAX_ADDS = 512; // frames held for a chart off screen; past this it redraws in full once seen
  const ROOM_MIN = 0.01; // a live x axis keeps its range while this fraction of it is left past the data

  const aligned = (lines) => lines.every((t) => {
    const a = t.x, b = lines[0].x;
    if (a.length !== b.length) return false;
    for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
    return true;
  });

  Object.assign(Obs.LineChart.prototype, {
    queueAdd(s, add) { // (added(): the frame's points, read at the next redraw)
      const adds = this.adds || (this.adds = []);
      if (!this.canAppend) return;
      if (add.nfx.length || adds.length >= MAX_ADDS) { this.canAppend = false; this.full = true; return; }
      adds.push(s, add);
    },

    // After a full redraw: the drawn lines into the buffers, and whether live points can be appended to them.
    fill(traces) {
      const n = this.items.length, view = this.ctx.view, lines = traces.slice(0, n);
      this.adds = this.adds || [];
      this.adds.length = 0;
      this.canAppend = Object.getPrototypeOf(this) === Obs.LineChart.prototype && n > 0 && !view.range &&
        !(view.smooth > 0) && !this.oobTotal && !this.nonPositive && !this.zoomPending &&
        traces.filter((t) => t.mode === "lines").length === n && lines.every((t) => t.x.length > 0);
      if (!this.canAppend) return;
      this.aligned = aligned(lines); // (lines on one x share its buffer's view: plot.js draws them without a join)
      lines.forEach((t, k) => {
        const it = this.items[k];
        it.buf = it.buf || new Obs.LiveBuffer();
        it.buf.load(t.x, t.y);
      });
    },

    // The frames since the last redraw appended and drawn; false: the full redraw is needed instead.
    appendLive() {
      if (!this.canAppend || this.ctx.view.range || this.zoomPending || !this.plot._figure) return false;
      const xa = this.ctx.xaxis, adds = this.adds, log = this.ctx.view.log.has(this.id), limit = 4 * this.resolution();
      for (let a = 0; a < adds.length; a += 2) { // everything checked before anything is appended
        const it = this.items.find((i) => i.series === adds[a]), add = adds[a + 1], b = this.ctx.bounds[it && it.name];
        if (!it || !it.buf || it.buf.n + add.x.length > limit) return false;
        for (let i = 0; i < add.y.length; i++) {
          if ((b && add.y[i] > b.max) || (log && !(add.y[i] > 0))) return false;
        }
      }
      const from = this.items.map((it) => it.buf.n); // (each line's points drawn)
      for (let a = 0; a < adds.length; a += 2) {
        const it = this.items.find((i) => i.series === adds[a]), add = adds[a + 1];
        for (let i = 0; i < add.x.length; i++) it.buf.push(xa.xOf(add.x[i]), add.y[i]);
      }
      adds.length = 0;
      const first = this.items[0].buf, n = first.n, last = first.x[n - 1];
      // every line's newest point on the same step (a line on steps of its own, or left behind: the full redraw)
      if (this.items.some((it) => it.buf.x[it.buf.n - 1] !== last || (this.aligned && it.buf.n !== n))) return false;
      const lay = this.plot.layout, lines = this.plot.data, [x] = first.view();
      let lo = Infinity;
      this.items.forEach((it, k) => {
        const b = it.buf;
        lines[k].x = this.aligned ? x : b.x.subarray(0, b.n); lines[k].y = b.y.subarray(0, b.n);
        if (b.x[0] < lo) lo = b.x[0];
      });
      const r = lay.xaxis.autorange === false && lay.xaxis.range; // the x range drawn, kept while it has room
      if (xa.mode !== "time" && !(r && r[0] === lo && last < r[1] - (r[1] - r[0]) * ROOM_MIN)) {
        this.headroom(lay.xaxis, lines);
      }
      const remark = this.remark; // (the marks changed: made again, chartmarks.js, and placed over the canvas)
      if (remark) { this.marks(lay, Obs.theme(), lines); this.remark = false; }
      if (!Obs.drawTail(this.plot, from)) return Obs.redrawData(this.plot); // (else the new segments alone drawn)
      if (remark) Obs.redrawMarks(this.plot);
      Obs.redrawCounts.tail++;
      return true;
    },
  });
})(window.Obs);
