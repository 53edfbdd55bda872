// Line charts over Obs.Store series: one trace per series (the first is the chart's own metric), extra traces
// joining as the run reveals them (per-domain losses), an optional right-hand axis (MFU next to tokens/s).
// Non-finite points are red markers at the top of the chart, per trace, and counted in the title.
// History redraws with Plotly.react; live points are appended with Plotly.extendTraces.
"use strict";

window.Obs = window.Obs || {};

(function (Obs) {
  const HISTORY_POINTS = 2000; // downsampled history per series (min/max buckets keep every spike)
  const PALETTE = ["#1f5fbf", "#e07b00", "#2e7d32", "#8e24aa", "#00838f", "#6d4c41", "#c2185b", "#546e7a",
                   "#9e9d24", "#3949ab"];

  class LineChart {
    // ctx: {store, schedule}; spec: {id, title, metrics, optional, extra_prefix, secondary}; parent: element.
    constructor(ctx, spec, parent) {
      this.ctx = ctx;
      this.id = spec.id || spec.metrics[0];
      this.spec = spec;
      this.secondary = new Set(spec.secondary || []);
      this.optional = new Set(spec.optional || []);
      this.items = []; // {name, series, color, secondary, pending: {x, y, nfx, nfk}}
      this.full = true; this.dirty = true;
      const box = document.createElement("div");
      box.className = "chart";
      box.dataset.metric = this.id;
      box.innerHTML = '<h3><span class="name"></span><span class="note"></span></h3><div class="plot"></div>';
      box.querySelector(".name").textContent = spec.title || this.id;
      box.querySelector(".name").title = this.id;
      this.box = box;
      this.plot = box.querySelector(".plot");
      this.plot.id = "chart-" + Obs.slug(this.id);
      parent.appendChild(box);
      Plotly.newPlot(this.plot, [], this.layout(), {responsive: true, displaylogo: false});
      this.plot.on("plotly_clickannotation", (ev) => Obs.overlayClicked(ev.annotation && ev.annotation.overlayId));
      for (const name of spec.metrics) this.addTrace(name);
    }

    // Does series `name` belong here as an extra trace (once the run has it)?
    wants(name) {
      if (this.items.some((it) => it.name === name)) return false;
      if (this.optional.has(name)) return true;
      const p = this.spec.extra_prefix;
      return !!p && name.startsWith(p) && name.length > p.length && !name.slice(p.length).includes("/");
    }

    addTrace(name) {
      if (this.items.some((it) => it.name === name)) return;
      const item = {name, color: PALETTE[this.items.length % PALETTE.length], secondary: this.secondary.has(name),
                    pending: null};
      this.items.push(item);
      item.series = this.ctx.store.want(name, this, {points: HISTORY_POINTS});
      this.full = true; this.dirty = true;
      this.ctx.schedule();
    }

    destroy() {
      for (const it of this.items) this.ctx.store.release(it.name, this);
      Plotly.purge(this.plot);
      this.box.remove();
    }

    reset() { this.full = true; this.dirty = true; this.ctx.schedule(); }

    added(s, add) {
      this.dirty = true;
      if (this.full) return; // the next full redraw reads the series as they are then
      const it = this.items.find((i) => i.series === s);
      if (!it) return;
      const p = it.pending || (it.pending = {x: [], y: [], nfx: [], nfk: []});
      p.x.push(...add.x); p.y.push(...add.y); p.nfx.push(...add.nfx); p.nfk.push(...add.nfk);
      this.ctx.schedule();
    }

    label(name) {
      const p = this.spec.extra_prefix;
      return p && name.startsWith(p) ? name.slice(p.length) : name;
    }

    traces() {
      const multi = this.items.length > 1;
      const lines = this.items.map((it, i) => ({
        x: it.series.steps.slice(), y: it.series.values.slice(), type: "scatter", mode: "lines",
        name: this.label(it.name), yaxis: it.secondary ? "y3" : "y",
        line: {width: i === 0 ? 1.5 : 1.1, color: it.color, dash: it.secondary ? "dot" : "solid"},
        hovertemplate: (multi ? this.label(it.name) + "<br>" : "") + "step %{x}<br>%{y}<extra></extra>",
      }));
      const marks = this.items.map((it) => ({
        x: it.series.nfSteps.slice(), y: it.series.nfSteps.map(() => 1), text: it.series.nfKinds.slice(),
        yaxis: "y2", type: "scatter", mode: "markers", showlegend: false, name: "non-finite " + it.name,
        marker: {color: "#c62828", symbol: "x", size: 9, line: {color: it.color, width: 1}},
        hovertemplate: this.label(it.name) + " step %{x}: %{text}<extra></extra>",
      }));
      return [...lines, ...marks];
    }

    layout() {
      const multi = this.items && this.items.length > 1;
      const sec = this.items && this.items.some((it) => it.secondary);
      const lay = {margin: {l: 55, r: sec ? 50 : 10, t: multi ? 26 : 8, b: 30}, showlegend: !!multi,
                   legend: {orientation: "h", x: 0, y: 1.0, yanchor: "bottom", font: {size: 10}},
                   hovermode: "closest", uirevision: "keep",
                   xaxis: {title: {text: "step"}, automargin: true},
                   yaxis: {automargin: true, exponentformat: "e"},
                   yaxis2: {overlaying: "y", range: [0, 1.05], visible: false, fixedrange: true}};
      // Rewinds (a resume from a checkpoint, a rollback): a dashed line where the run went back to.
      const rw = (this.ctx && this.ctx.rewinds) || [];
      lay.shapes = rw.map((r) => ({type: "line", xref: "x", yref: "paper", x0: r.to_step, x1: r.to_step, y0: 0,
                                   y1: 1, line: {color: "#9e9e9e", width: 1, dash: "dash"}}));
      lay.annotations = rw.map((r) => ({xref: "x", yref: "paper", x: r.to_step, y: 1, yanchor: "bottom",
                                        showarrow: false, font: {size: 9, color: "#757575"},
                                        text: `↺ ${r.from_step}→${r.to_step}`}));
      // Overlays from feature modules (anomalies, annotations, interventions, forecasts): Obs.overlays.
      for (const o of Obs.overlaysFor(this)) {
        const band = o.x1 !== undefined && o.x1 !== o.x0;
        lay.shapes.push(band
          ? {type: "rect", xref: "x", yref: "paper", x0: o.x0, x1: o.x1, y0: 0, y1: 1, layer: "below",
             fillcolor: o.color || "rgba(255,160,0,0.18)", line: {width: 0}}
          : {type: "line", xref: "x", yref: "paper", x0: o.x0, x1: o.x0, y0: 0, y1: 1,
             line: {color: o.color || "#ef6c00", width: 1.5}});
        if (o.label) {
          lay.annotations.push({xref: "x", yref: "paper", x: o.x0, y: 1, yanchor: "bottom", xanchor: "left",
                                showarrow: false, font: {size: 9, color: o.textColor || "#8d4a00"}, text: o.label,
                                captureevents: !!o.onClick, overlayId: o.id});
        }
      }
      if (sec) {
        const names = this.items.filter((it) => it.secondary).map((it) => this.label(it.name));
        lay.yaxis3 = {overlaying: "y", side: "right", automargin: true, exponentformat: "e", showgrid: false,
                      title: {text: names.join(", "), font: {size: 10}}};
      }
      return lay;
    }

    redraw() {
      if (!this.dirty) return;
      this.dirty = false;
      const n = this.items.length;
      if (this.full) {
        Plotly.react(this.plot, this.traces(), this.layout());
      } else {
        this.items.forEach((it, i) => {
          const p = it.pending;
          if (!p) return;
          if (p.x.length) Plotly.extendTraces(this.plot, {x: [p.x], y: [p.y]}, [i]);
          if (p.nfx.length) Plotly.extendTraces(this.plot, {x: [p.nfx], y: [p.nfx.map(() => 1)], text: [p.nfk]}, [n + i]);
        });
      }
      this.full = false;
      this.items.forEach((it) => { it.pending = null; });
      const nf = this.items.reduce((a, it) => a + it.series.nfTotal, 0);
      const empty = this.items.every((it) => it.series.loaded && it.series.steps.length + it.series.nfSteps.length === 0);
      const note = this.box.querySelector(".note");
      note.textContent = nf ? nf + " non-finite" : (empty ? "no data yet" : "");
      note.classList.toggle("bad", nf > 0);
    }
  }

  // ------------------------------------------------------------------------------------------ overlays
  // Feature modules publish marks on the charts without touching chart code:
  //   Obs.setOverlays(source, [{id, x0, x1?, metric?, label?, color?, onClick?}]); then ctx.schedule().
  // `metric` limits a mark to the charts that draw that series; x1 absent or equal to x0 draws a line.
  const overlaySources = new Map();
  const charts = new Set();
  Obs.setOverlays = (source, list) => {
    overlaySources.set(source, list || []);
    charts.forEach((ch) => { ch.full = true; ch.dirty = true; });
  };
  Obs.overlaysFor = (chart) => {
    const names = new Set((chart.items || []).map((it) => it.name));
    const out = [];
    overlaySources.forEach((list) => list.forEach((o) => { if (!o.metric || names.has(o.metric)) out.push(o); }));
    return out;
  };
  Obs.overlayClicked = (id) => {
    overlaySources.forEach((list) => list.forEach((o) => { if (o.id === id && o.onClick) o.onClick(o); }));
  };
  Obs.registerChart = (chart) => charts.add(chart);

  Obs.LineChart = LineChart;
  Obs.PALETTE = PALETTE;
})(window.Obs);
