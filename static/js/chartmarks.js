// A line chart's marks (a part of Obs.LineChart, as zoom.js): rewinds and the feature modules' overlays
// (anomalies, annotations, interventions: Obs.setOverlays) as the figure's shapes (lines, bands) and labels; close
// labels fold into one with a count at the chart's zoom (Obs.labelGroups), a click on it zooms in on them.
"use strict";

(function (Obs) {
  const LABEL_CHAR_PX = 5.6; // a marker label's width per character (9 px font), to tell when two would overprint
  const HOVER = {get() { return Obs.groupHover(this.obsMarks); }, enumerable: true}; // (a label's hover text)

  // a mark's shape (a band, else a line): `was` again where it is the same
  const shape = (was, type, x0, x1, color) => {
    const rect = type === "rect";
    if (was && was.type === type && was.x0 === x0 && was.x1 === x1 &&
        (rect ? was.fillcolor === color : was.line.color === color && was.line.width === 1.5 && !was.line.dash)) {
      return was;
    }
    return rect ? {type, x0, x1, fillcolor: color, line: {width: 0}} : {type, x0, x1, line: {color, width: 1.5}};
  };

  // two groups of marks with the same ids and labels (a group's label and id are made from them)
  const sameMarks = (a, b) => {
    if (a.length !== b.length) return false;
    for (let i = 0; i < a.length; i++) if (a[i].id !== b[i].id || a[i].label !== b[i].label) return false;
    return true;
  };

  Object.assign(Obs.LineChart.prototype, {
    // A live chart's marks are made again at almost every step of a detector storm, most of them as they were: a
    // shape or label equal to the one at its place in the layout's last ones is that one again (plot.js places them
    // from their values, never changes them).
    marks(lay, t, traces) { // rewinds and feature overlays (anomalies, annotations, interventions): Obs.setOverlays
      const xa = this.ctx.xaxis, x = (step) => xa.xOf(step);
      const rw = this.ctx.rewinds || [], oldShapes = lay.shapes || [], oldLabels = lay.annotations || [];
      lay.shapes = rw.map((r) => ({type: "line", x0: x(r.to_step), x1: x(r.to_step),
                                   line: {color: t.muted, width: 1, dash: "dash"}}));
      lay.annotations = [];
      // a rewind's label (centred on its line) folds with close command and anomaly labels too
      const folding = rw.map((r, i) => ({id: "rewind-" + i, x0: r.to_step, textColor: t.muted, anchor: "center",
                                         label: r.label || `↺ ${r.from_step}→${r.to_step}`, collapse: true}));
      const overlays = Obs.overlaysFor(this);
      for (let i = 0; i < overlays.length; i++) { // (an index, not an iterator: no object a mark in baseline code)
        const o = overlays[i], x0 = x(o.x0), band = o.x1 !== undefined && o.x1 !== o.x0;
        lay.shapes.push(shape(oldShapes[lay.shapes.length], band ? "rect" : "line", x0, band ? x(o.x1) : x0,
                              o.color || (band ? "rgba(255,160,0,0.18)" : "#ef6c00")));
        if (o.label && o.collapse) folding.push(o);
        else if (o.label) lay.annotations.push(this.markLabel(x, [o], oldLabels[lay.annotations.length]));
      }
      // close labels fold into one at this zoom (a click on it zooms in on them; its hover lists them all)
      const px = this.pixels(lay, traces);
      this.groups = new Map();
      const groups = Obs.labelGroups(folding, (step) => px(x(step)), LABEL_CHAR_PX);
      for (let i = 0; i < groups.length; i++) {
        const g = groups[i], label = this.markLabel(x, g, oldLabels[lay.annotations.length]);
        lay.annotations.push(label);
        if (g.length > 1) this.groups.set(label.overlayId, g);
      }
    },

    groupId(g) { return "group:" + g.map((o) => o.id).join(","); },

    // a label for the marks g (one, or a group folded into one): `was` again where it equals it
    markLabel(x, g, was) {
      const o = g[0], many = g.length > 1, at = x(o.x0), anchor = o.anchor || "left";
      const again = many && was && was.obsMarks && sameMarks(was.obsMarks, g); // (its text and id as they were)
      const text = again ? was.text : Obs.groupLabel(g), id = !many ? o.id : again ? was.overlayId : this.groupId(g);
      const color = o.textColor || "var(--mark-text, #8d4a00)", capture = many || !!o.onClick;
      const hover = many || !!o.hover;
      if (was && was.x === at && was.xanchor === anchor && was.font.color === color && was.text === text &&
          was.captureevents === capture && was.overlayId === id && ("hovertext" in was) === hover) {
        was.obsMarks = g; // (its hover text: these marks')
        return was;
      }
      const label = {x: at, xanchor: anchor, font: {color}, text, captureevents: capture, overlayId: id};
      Object.defineProperty(label, "obsMarks", {value: g, writable: true}); // (not enumerable: not in a copy)
      // its hover text (every mark of a group in full) made when read: a live chart's marks are made again at
      // almost every step of a detector storm, and their hover texts were most of what a live update allocated
      if (hover) Object.defineProperty(label, "hovertext", HOVER);
      return label;
    },

    // x (axis units) -> pixels from the plot's left edge, for the x range this layout draws (its own, else the
    // lines' extent).
    pixels(lay, traces) {
      let [lo, hi] = lay.xaxis.autorange === false && lay.xaxis.range ? lay.xaxis.range : [Infinity, -Infinity];
      if (!(hi > lo)) [lo, hi] = Obs.xExtent(traces);
      const width = Math.max(50, (this.width || 600) - lay.margin.l - lay.margin.r);
      return hi > lo ? (v) => (v - lo) / (hi - lo) * width : () => 0; // (no extent: every mark at one place)
    },

    clickedLabel(id) {
      const g = this.groups && this.groups.get(id);
      if (!g) { Obs.overlayClicked(id); return; }
      const steps = g.map((o) => o.x0), lo = Math.min(...steps), hi = Math.max(...steps);
      if (hi - lo < 1) { Obs.overlayClicked(g[0].id); return; } // (one step: zooming would not part them)
      const pad = Math.max(2, (hi - lo) * 0.5);
      if (Obs.zoomTo) Obs.zoomTo(Math.max(0, lo - pad), hi + pad); // (the dashboard's)
    },
  });
})(window.Obs);
