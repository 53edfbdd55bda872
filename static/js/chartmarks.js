// A line chart's marks (a part of Obs.LineChart, as zoom.js): rewinds and the feature modules' overlays
// (anomalies, annotations, interventions: Obs.setOverlays) as the figure's shapes (lines, bands) and labels; close
// labels fold into one with a count at the chart's zoom (Obs.labelGroups), a click on it zooms in on them.
"use strict";

(function (Obs) {
  const LABEL_CHAR_PX = 5.6; // a marker label's width per character (9 px font), to tell when two would overprint

  Object.assign(Obs.LineChart.prototype, {
    marks(lay, t, traces) { // rewinds and feature overlays (anomalies, annotations, interventions): Obs.setOverlays
      const xa = this.ctx.xaxis, x = (step) => xa.xOf(step);
      const rw = this.ctx.rewinds || [];
      lay.shapes = rw.map((r) => ({type: "line", x0: x(r.to_step), x1: x(r.to_step),
                                   line: {color: t.muted, width: 1, dash: "dash"}}));
      lay.annotations = [];
      // a rewind's label (centred on its line) folds with close command and anomaly labels too
      const folding = rw.map((r, i) => ({id: "rewind-" + i, x0: r.to_step, textColor: t.muted, anchor: "center",
                                         label: r.label || `↺ ${r.from_step}→${r.to_step}`, collapse: true}));
      for (const o of Obs.overlaysFor(this)) {
        const x0 = x(o.x0), band = o.x1 !== undefined && o.x1 !== o.x0;
        lay.shapes.push(band
          ? {type: "rect", x0, x1: x(o.x1), fillcolor: o.color || "rgba(255,160,0,0.18)", line: {width: 0}}
          : {type: "line", x0, x1: x0, line: {color: o.color || "#ef6c00", width: 1.5}});
        if (o.label && o.collapse) folding.push(o);
        else if (o.label) lay.annotations.push(this.markLabel(x, [o]));
      }
      // close labels fold into one at this zoom (a click on it zooms in on them; its hover lists them all)
      const px = this.pixels(lay, traces);
      this.groups = new Map();
      for (const g of Obs.labelGroups(folding, (step) => px(x(step)), LABEL_CHAR_PX)) {
        lay.annotations.push(this.markLabel(x, g));
        if (g.length > 1) this.groups.set(this.groupId(g), g);
      }
    },

    groupId(g) { return "group:" + g.map((o) => o.id).join(","); },

    markLabel(x, g) {
      const o = g[0], many = g.length > 1;
      const label = {x: x(o.x0), xanchor: o.anchor || "left", font: {color: o.textColor || "var(--mark-text, #8d4a00)"},
                     text: Obs.groupLabel(g), captureevents: many || !!o.onClick,
                     overlayId: many ? this.groupId(g) : o.id};
      // its hover text (every mark of a group in full) made when read: a live chart's marks are made again at
      // almost every step of a detector storm, and their hover texts were most of what a live update allocated
      if (many || o.hover) Object.defineProperty(label, "hovertext", {get: () => Obs.groupHover(g), enumerable: true});
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
