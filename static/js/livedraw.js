// The live tip of a figure (plot.js) drawn alone: when the points appended to its lines leave everything drawn as
// it is (each new x inside the x range drawn, each new y inside its axis's range drawn, no point mark where the new
// segments go, no pointer over the plot), only the new segments are stroked onto the chart's canvas, over what is
// there (none while the new points stay inside the pixels drawn in their line's last column): no clear, no grid,
// axes, marks or other point drawn again (a full redraw of every chart a live step was most of a live update's
// main-thread time). They are drawn as uPlot draws a line (its public options and instance: the series' stroke,
// width, dash and cap, round joins, points on whole canvas pixels, the line's half-pixel offset, clipped to the
// plot area widened by half the line).
//   Obs.drawTail(node, from)  node._figure's lines (their x / y already holding the new points, chartlive.js),
//                             line k from its point from[k] - 1 on (from[k]: the points the canvas holds); true
//                             with no new point; false: nothing drawn, the caller redraws in full (Obs.redrawData)
// uPlot's own data catches up lazily: at the next full redraw (any setData), or when a pointer enters the chart
// (its hover reads uPlot's data); while a pointer is over the plot every live point redraws in full, as before.
// What the canvas holds is known from uPlot's public hooks (setData, draw): a draw of uPlot's own (a new pixel
// ratio) draws its data as last set, and the next live point then redraws in full.
"use strict";

window.Obs = window.Obs || {};

(function (Obs) {
  // A point mark where the new segments go (drawn above the lines on the canvas), within `lo`..`hi` (canvas pixels)
  // and its own half width: then the chart is drawn in full instead (the marks are at past steps, a live tip rarely
  // has one). Vertical marks are elements over and under the canvas (plot.js): no stroke covers them.
  function marked(fig, u, lo, hi) {
    const dpr = u.pxRatio || devicePixelRatio || 1, pad = 3 * dpr;
    for (const tr of fig.markers) {
      const r = ((tr.marker && tr.marker.size) || 8) / 2 * dpr + pad;
      for (let i = 0; i < tr.x.length; i++) {
        const x = u.valToPos(tr.x[i], "x", true);
        if (x >= lo - r && x <= hi + r) return true;
      }
    }
    return false;
  }

  // Lines on steps of their own on one x, as uPlot draws them (uPlot.join: a line's y null where it has no point);
  // where every line only grew by points on the same new steps past the last join of the same figure's lines (the
  // live append path), that join grows by their rows instead of joining every point again.
  const joins = new WeakMap(); // a figure's lines -> {xs: each line's x as joined, n: their lengths, table}
  Obs.joinLines = (lines) => {
    const j = joins.get(lines), t0 = lines[0].x, add = t0.length - (j ? j.n[0] : 0), X = j && j.table[0];
    const grew = j && add > 0 && lines.every((t, k) => t.x.length - j.n[k] === add && ArrayBuffer.isView(t.x) &&
      t.x.buffer === j.xs[k].buffer && t.x.byteOffset === j.xs[k].byteOffset);
    let ok = grew && t0[j.n[0]] > X[X.length - 1];
    for (let k = 1; ok && k < lines.length; k++) {
      for (let i = 0; i < add; i++) if (lines[k].x[j.n[k] + i] !== t0[j.n[0] + i]) { ok = false; break; }
    }
    if (!ok) {
      const table = uPlot.join(lines.map((t) => [t.x, t.y]));
      joins.set(lines, {xs: lines.map((t) => t.x), n: lines.map((t) => t.x.length), table});
      return table;
    }
    for (let i = 0; i < add; i++) {
      X.push(t0[j.n[0] + i]);
      lines.forEach((t, k) => j.table[k + 1].push(t.y[j.n[k] + i]));
    }
    lines.forEach((t, k) => { j.xs[k] = t.x; j.n[k] = t.x.length; });
    return j.table.slice();
  };

  // What the canvas holds, each line's points (fig.canvasN): uPlot's data as last set (fig.dataN) after each of its
  // draws, that and the tails drawn since; a pointer entering the chart brings uPlot's data up to date first.
  function follow(node, fig, u, from) {
    if (fig.tailU === u) return;
    fig.tailU = u; fig.dataN = fig.canvasN = from.slice(); fig.cols = [];
    (u.hooks.setData = u.hooks.setData || []).push(() => {
      fig.dataN = fig.lines.map((t) => t.x.length); fig.behind = false;
    });
    (u.hooks.draw = u.hooks.draw || []).push(() => { fig.canvasN = fig.dataN; fig.cols = []; });
    if (!fig.tailNode) {
      fig.tailNode = true;
      node.addEventListener("pointerenter", () => { if (fig.behind) Obs.redrawData(node); });
    }
  }

  // from: each line's points the canvas holds (its newer ones are drawn)
  Obs.drawTail = (node, from) => {
    const fig = node._figure, u = fig && fig.u, lines = fig && fig.lines;
    if (!u || !lines.length || lines.length !== from.length || fig.log.x || u.cursor.left >= 0) return false;
    follow(node, fig, u, from);
    const xa = fig.layout.xaxis || {}, r = xa.range, sx = u.scales.x;
    if (xa.autorange !== false || !r || r[0] !== sx.min || r[1] !== sx.max) return false;
    if (u.series.length !== lines.length + 1 || lines.some((t) => t.fill)) return false;
    let lo = Infinity, hi = -Infinity;
    for (let k = 0; k < lines.length; k++) { // every new point inside the scales drawn
      const x = lines[k].x, y = lines[k].y, sy = u.scales[u.series[k + 1].scale], f = from[k];
      if (fig.canvasN[k] !== f || !(f >= 1) || x.length < f) return false;
      for (let i = f; i < x.length; i++) {
        if (!(x[i] >= sx.min && x[i] <= sx.max && y[i] >= sy.min && y[i] <= sy.max)) return false;
      }
      if (x.length > f) { lo = Math.min(lo, x[f - 1]); hi = Math.max(hi, x[x.length - 1]); }
    }
    if (!(hi >= lo)) return true; // (no new point: nothing to draw)
    if (marked(fig, u, u.valToPos(lo, "x", true), u.valToPos(hi, "x", true))) return false;
    const c = u.ctx, {left, top, width, height} = u.bbox, dpr = u.pxRatio || devicePixelRatio || 1;
    let stroked = false; // (a line drawn: the lines after it are drawn over it, as uPlot's order has them)
    for (let k = 0; k < lines.length; k++) {
      const s = u.series[k + 1], key = s.scale, x = lines[k].x, y = lines[k].y, f = from[k];
      const w = Math.round(s.width * dpr * 1000) / 1000, off = (w % 2) / 2;
      const round = s.pxAlign === 0 ? (v) => v : Math.round;
      if (!s.show || !(w > 0) || x.length === f) continue;
      // New points inside the last column's drawn span change no pixel (in a long run a column holds hundreds of
      // steps): nothing is stroked for them, and the segment from the last of them is drawn with the next column's.
      // fig.cols[k]: [x, least y, greatest y] of the points drawn in line k's last column, as far as its tails
      // drew them (canvas px, points on whole pixels as uPlot puts them; after a full draw: none known)
      const col = fig.cols[k] || (fig.cols[k] = [NaN, Infinity, -Infinity]);
      let inside = !s.dash; // (a dashed line's pattern would not meet the drawn one)
      for (let i = f; i < x.length; i++) {
        const px = round(u.valToPos(x[i], "x", true)), py = round(u.valToPos(y[i], key, true));
        if (px !== col[0]) { // a new column
          col[0] = px; col[1] = col[2] = py; inside = false;
        } else if (py < col[1] || py > col[2]) { // the column's span grows
          col[1] = Math.min(col[1], py); col[2] = Math.max(col[2], py); inside = false;
        }
      }
      if (inside && !stroked) continue;
      stroked = true;
      c.save();
      if (s.pxAlign === 1 && off > 0) c.translate(off, off);
      c.beginPath(); c.rect(left - w / 2, top - w / 2, width + w, height + w); c.clip();
      c.strokeStyle = typeof s.stroke === "function" ? s.stroke(u, k + 1) : s.stroke;
      c.lineWidth = w; c.lineJoin = "round"; c.lineCap = s.cap || "butt"; c.setLineDash(s.dash || []);
      c.beginPath();
      c.moveTo(round(u.valToPos(x[f - 1], "x", true)), round(u.valToPos(y[f - 1], key, true)));
      for (let i = f; i < x.length; i++) {
        c.lineTo(round(u.valToPos(x[i], "x", true)), round(u.valToPos(y[i], key, true)));
      }
      c.stroke();
      c.restore();
    }
    fig.canvasN = lines.map((t) => t.x.length); fig.behind = true;
    return true;
  };
})(window.Obs);
