// A figure's marks (plot.js draws the figure): vertical marks (its layout's shapes: lines, bands) as elements over
// and under uPlot's canvas, point marks (✕, ▲: its marker traces) on the canvas, and the marks' labels above the plot
// in HTML, with the box their hover shows.
//   Obs.placeMarks(u, fig)                 the shapes and labels placed for the scales drawn (after each draw, or
//                                          alone when only the marks changed: Obs.redrawMarks)
//   Obs.drawPointMarks(u, fig)             the point marks, on the canvas (uPlot's draw)
//   Obs.drawMarks(ctx, u, fig, below)      the shapes drawn on another canvas (bands: below; the PNG export)
//   Obs.hideMarkTip(fig)
"use strict";

window.Obs = window.Obs || {};

(function (Obs) {
  const DASH = {dot: [2, 3], dash: [6, 4]}, make = (tag, props) => Object.assign(document.createElement(tag), props);

  // Vertical marks as elements over the plot area: bands under uPlot's canvas, lines over it (bands under the lines,
  // mark lines above them). A change of the marks alone moves, adds or removes elements and leaves the canvas as it
  // is: in a detector storm a live chart's marks change at almost every step, and redrawing the chart for them (its
  // bands filled again) was most of a live update's main-thread time. Written only where changed.
  const LINE_STYLE = {dot: "dotted", dash: "dashed"};
  // Marks placed again are compared with what placed them (their x and look, the scale drawn: fig.marksAt) as they
  // are, and an unchanged one costs no arithmetic, text or style write: in a detector storm a live chart's marks are
  // placed again at almost every step, and making their placement anew was most of what a live update allocated.
  function placeShapes(u, fig, same) {
    if (fig.shapesU !== u) { // (a new uPlot instance: new layers)
      fig.shapesU = u;
      fig.shapeLayers = [u.under, u.over].map((p) => p.insertBefore(make("div", {className: "shapes"}), p.firstChild));
    }
    const dpr = u.pxRatio || devicePixelRatio || 1, shapes = fig.layout.shapes || [];
    let bands = 0, lines = 0;
    for (let i = 0; i < shapes.length; i++) {
      const s = shapes[i], k = s.type === "rect" ? 0 : 1, layer = fig.shapeLayers[k]; // (0: a band, under; 1: a line)
      const el = layer.childNodes[k ? lines++ : bands++] || layer.appendChild(make("i")), ln = s.line || NO_LINE;
      const was = el.obsShape;
      if (same && was && was.x0 === s.x0 && was.x1 === s.x1 && was.k === k && was.color === ln.color &&
          was.w === ln.width && was.dash === ln.dash && was.fill === s.fillcolor) continue;
      el.obsShape = {x0: s.x0, x1: s.x1, k, color: ln.color, w: ln.width, dash: ln.dash, fill: s.fillcolor};
      const w = ln.width || 1.5, x0 = u.valToPos(+s.x0, "x"), x1 = u.valToPos(+s.x1, "x");
      const look = k // (a line where the canvas drew it: centred on a whole pixel's middle)
        ? `left:${(Math.round(x0 * dpr) + 0.5) / dpr - w / 2}px;` +
          `border-left:${w}px ${LINE_STYLE[ln.dash] || "solid"} ${ln.color || "#ef6c00"}`
        : `left:${Math.min(x0, x1)}px;width:${Math.max(1 / dpr, Math.abs(x1 - x0))}px;` +
          `background:${s.fillcolor || "rgba(255,160,0,0.18)"}`;
      if (el.obsLook !== look) { el.obsLook = look; el.style.cssText = look; }
    }
    trim(fig.shapeLayers[0], bands);
    trim(fig.shapeLayers[1], lines);
  }
  const NO_LINE = {};
  const trim = (layer, n) => { while (layer.childNodes.length > n) layer.lastChild.remove(); };

  // The same marks drawn on a canvas (the PNG export's copy of the chart's: bands under its lines, lines over them)
  Obs.drawMarks = (c, u, fig, below) => {
    const {left, top, width, height} = u.bbox, dpr = devicePixelRatio || 1;
    c.save();
    c.beginPath(); c.rect(left, top, width, height); c.clip();
    for (const s of fig.layout.shapes || []) {
      if ((s.type === "rect") !== below) continue;
      const x0 = u.valToPos(+s.x0, "x", true);
      if (s.type === "rect") {
        const x1 = u.valToPos(+s.x1, "x", true);
        c.fillStyle = s.fillcolor || "rgba(255,160,0,0.18)";
        c.fillRect(Math.min(x0, x1), top, Math.max(1, Math.abs(x1 - x0)), height);
      } else {
        const ln = s.line || {};
        c.strokeStyle = ln.color || "#ef6c00"; c.lineWidth = (ln.width || 1.5) * dpr;
        c.setLineDash((DASH[ln.dash] || []).map((d) => d * dpr));
        c.beginPath(); c.moveTo(Math.round(x0) + 0.5, top); c.lineTo(Math.round(x0) + 0.5, top + height); c.stroke();
      }
    }
    c.restore();
  };

  // Point marks: ✕ and ▲ at their value (y, y3) or at the top of the plot (y2, 0..1 of its height)
  Obs.drawPointMarks = (u, fig) => {
    const c = u.ctx, {left, top, width, height} = u.bbox, dpr = devicePixelRatio || 1;
    for (const tr of fig.markers) {
      const mk = tr.marker || {}, r = (mk.size || 8) / 2 * dpr;
      c.strokeStyle = mk.color || "#c62828"; c.lineWidth = 1.6 * dpr; c.setLineDash([]);
      for (let i = 0; i < tr.x.length; i++) {
        const x = u.valToPos(tr.x[i], "x", true);
        if (x < left - r || x > left + width + r) continue;
        const y = tr.yaxis === "y2" ? top + (1 - tr.y[i] / 1.05) * height + r
          : u.valToPos(tr.y[i], tr.yaxis === "y3" ? "y3" : "y", true);
        c.beginPath();
        if (String(mk.symbol).startsWith("triangle")) {
          c.moveTo(x, y - r); c.lineTo(x + r, y + r); c.lineTo(x - r, y + r); c.closePath();
        } else { c.moveTo(x - r, y - r); c.lineTo(x + r, y + r); c.moveTo(x + r, y - r); c.lineTo(x - r, y + r); }
        c.stroke();
      }
    }
  };

  // Labels above the plot, in HTML (clickable, hoverable, read by screen readers as text)
  function placeLabels(u, fig, same) {
    const layer = fig.labels, dpr = devicePixelRatio || 1, all = fig.layout.annotations || [];
    // (the plot area from uPlot's box, canvas pixels: reading the overlay's offsets would force a layout)
    const plotLeft = u.bbox.left / dpr, plotTop = u.bbox.top / dpr, w = u.bbox.width / dpr;
    let n = 0;
    for (let i = 0; i < all.length; i++) {
      const a = all[i];
      if (!a.text) continue;
      let el = layer.childNodes[n++];
      if (!el) {
        el = layer.appendChild(make("span", {className: "mark-label"}));
        el.addEventListener("mouseenter", () => {
          const text = el.obsLabel.hovertext; // (made as it is read: chartmarks.js)
          if (text) showTip(fig, el, text);
        });
        el.addEventListener("mouseleave", () => hideTip(fig));
        el.addEventListener("click", () => {
          if (el.obsLabel.captureevents && fig.on.label) fig.on.label(el.obsLabel.overlayId);
        });
      }
      const was = el.obsLabel, color = (a.font && a.font.color) || "";
      el.obsLabel = a;
      if (same && was && was.x === a.x && was.text === a.text && was.xanchor === a.xanchor &&
          was.captureevents === a.captureevents && ("hovertext" in was) === ("hovertext" in a) &&
          el.obsColor === color) continue;
      el.obsColor = color;
      if (el.textContent !== a.text) el.textContent = a.text;
      const x = u.valToPos(+a.x, "x"), hide = !(x >= -1 && x <= w + 1);
      // whole pixels: a live x axis moves a label by a fraction of one an update, so it is rarely rewritten
      const left = Math.round(plotLeft + x) + "px";
      if (el.style.left !== left) el.style.left = left;
      const look = [plotTop, color, a.xanchor, !!(a.captureevents || a.hovertext), hide].join("|");
      if (el.obsLook === look) continue; // (unchanged: no style written, no layout invalidated)
      el.obsLook = look;
      el.hidden = hide;
      el.style.top = (plotTop - 16) + "px";
      el.style.color = color;
      el.classList.toggle("center", a.xanchor === "center");
      el.classList.toggle("live", !!(a.captureevents || a.hovertext));
    }
    trim(layer, n);
  }

  function showTip(fig, el, text) {
    const tip = fig.tip, r = el.getBoundingClientRect(), box = fig.node.getBoundingClientRect();
    tip.textContent = String(text).replace(/<br>/g, "\n"); tip.hidden = false; fig.labelTip = true;
    tip.style.left = Math.max(0, Math.min(r.left - box.left, box.width - 240)) + "px";
    tip.style.top = (r.bottom - box.top + 4) + "px";
  }
  const hideTip = Obs.hideMarkTip = (fig) => { fig.tip.hidden = true; fig.labelTip = false; };

  Obs.placeMarks = (u, fig) => {
    const sx = u.scales.x, b = u.bbox, at = fig.marksAt, dpr = u.pxRatio || devicePixelRatio || 1;
    const same = !!at && at.u === u && at.min === sx.min && at.max === sx.max && at.left === b.left &&
      at.top === b.top && at.width === b.width && at.dpr === dpr;
    if (!same) fig.marksAt = {u, min: sx.min, max: sx.max, left: b.left, top: b.top, width: b.width, dpr};
    placeShapes(u, fig, same);
    placeLabels(u, fig, same);
  };
})(window.Obs);
