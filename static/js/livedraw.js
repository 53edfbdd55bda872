// The live tip of a figure (plot.js) drawn alone: when the points appended to its lines leave everything drawn as
// it is (each new x inside the x range drawn, each new y inside its axis's range drawn, no mark where the new
// segments go, no pointer over the plot), only the new segments are stroked onto the chart's canvas, over what is
// there: no clear, no grid, axes, marks or other point drawn again (a full redraw of every chart a live step was
// most of a live update's main-thread time). They are drawn as uPlot draws a line (its public options and
// instance: the series' stroke, width, dash and cap, round joins, points on whole canvas pixels, the line's
// half-pixel offset, clipped to the plot area widened by half the line).
//   Obs.drawTail(node, from)  node._figure's lines (their x / y already holding the new points, chartlive.js) drawn
//                             from point `from - 1` on; false: nothing drawn, the caller redraws in full
//                             (Obs.redrawData)
// uPlot's own data catches up lazily: at the next full redraw (any setData), or when a pointer enters the chart
// (its hover reads uPlot's data); while a pointer is over the plot every live point redraws in full, as before.
"use strict";

(function (Obs) {
  // Sticks out of the plot where the new segments go (a vertical mark, a point mark): drawn above the lines, so the
  // chart is drawn in full instead (a mark at the live tip is rare: the marks are at past steps).
  function marked(fig, u, lo, hi) {
    const dpr = u.pxRatio || devicePixelRatio || 1, pad = 8 * dpr;
    for (const s of fig.layout.shapes || []) {
      if (s.type === "rect") continue; // (bands are drawn below the lines)
      const x = u.valToPos(+s.x0, "x", true);
      if (x >= lo - pad && x <= hi + pad) return true;
    }
    for (const tr of fig.markers) {
      for (let i = 0; i < tr.x.length; i++) {
        const x = u.valToPos(tr.x[i], "x", true);
        if (x >= lo - pad && x <= hi + pad) return true;
      }
    }
    return false;
  }

  // The canvas is behind uPlot's data: a pointer entering the chart brings it up to date (a full redraw) first.
  function follow(node, fig) {
    if (fig.tailHooked) return;
    fig.tailHooked = true;
    node.addEventListener("pointerenter", () => {
      if (fig.u && fig.tailData === fig.u.data) { fig.tailData = null; Obs.redrawData(node); }
    });
  }

  Obs.drawTail = (node, from) => {
    const fig = node._figure, u = fig && fig.u, lines = fig && fig.lines;
    if (!u || !lines.length || !(from >= 1) || fig.log.x || u.cursor.left >= 0) return false;
    // what the canvas holds: uPlot's data, or that and the tail drawn since
    const held = fig.tailData === u.data ? fig.tailN : u.data[0] && u.data[0].length;
    const xa = fig.layout.xaxis || {}, r = xa.range, sx = u.scales.x, n = lines[0].x.length;
    if (held !== from || n <= from || xa.autorange !== false || !r || r[0] !== sx.min || r[1] !== sx.max) return false;
    if (u.series.length !== lines.length + 1 || lines.some((t) => t.fill || t.x.length !== n)) return false;
    for (let k = 0; k < lines.length; k++) { // every new point inside the scales drawn
      const x = lines[k].x, y = lines[k].y, sy = u.scales[u.series[k + 1].scale];
      for (let i = from; i < n; i++) {
        if (!(x[i] >= sx.min && x[i] <= sx.max && y[i] >= sy.min && y[i] <= sy.max)) return false;
      }
    }
    const lo = u.valToPos(lines[0].x[from - 1], "x", true), hi = u.valToPos(lines[0].x[n - 1], "x", true);
    if (marked(fig, u, lo, hi)) return false;
    const c = u.ctx, {left, top, width, height} = u.bbox, dpr = u.pxRatio || devicePixelRatio || 1;
    c.save();
    for (let k = 0; k < lines.length; k++) { // in uPlot's order: later lines over earlier ones
      const s = u.series[k + 1], key = s.scale, x = lines[k].x, y = lines[k].y;
      const w = Math.round(s.width * dpr * 1000) / 1000, off = (w % 2) / 2;
      const round = s.pxAlign === 0 ? (v) => v : Math.round;
      if (!s.show || !(w > 0)) continue;
      c.save();
      if (s.pxAlign === 1 && off > 0) c.translate(off, off);
      c.beginPath(); c.rect(left - w / 2, top - w / 2, width + w, height + w); c.clip();
      c.strokeStyle = typeof s.stroke === "function" ? s.stroke(u, k + 1) : s.stroke;
      c.lineWidth = w; c.lineJoin = "round"; c.lineCap = s.cap || "butt"; c.setLineDash(s.dash || []);
      c.beginPath();
      c.moveTo(round(u.valToPos(x[from - 1], "x", true)), round(u.valToPos(y[from - 1], key, true)));
      for (let i = from; i < n; i++) c.lineTo(round(u.valToPos(x[i], "x", true)), round(u.valToPos(y[i], key, true)));
      c.stroke();
      c.restore();
    }
    c.restore();
    fig.tailData = u.data; fig.tailN = n;
    follow(node, fig);
    return true;
  };
})(window.Obs);
