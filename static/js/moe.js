// The MoE router panel over Obs.Store series: for one layer (a select), a heatmap of tokens per expert (rows:
// experts, columns: bins of W steps, a cell the largest load in its bin: a hot expert is never averaged away) from
// the routing_hist/<e> series, with the layer's max/mean load and capacity-overflow rate as lines below. History
// holds min and max per bucket of B steps, and a bin is at least 2B wide, so a cell is empty (grey, "no data") only
// when the expert reported nothing there; non-finite loads are red ✕. Past MAX_COLS bins the panel re-bins wider.
"use strict";

(function (Obs) {
  const EXPERT_POINTS = 300; // history per expert series
  const LINE_POINTS = 1000; // history of the max/mean-load and overflow lines
  const EXPERT_CAP = 20000; // points held per expert series before it reloads its history
  const MAX_COLS = 400; // heatmap columns before re-binning
  const MIN_REDRAW_MS = 200; // the heatmap redraws at most 5 times a second
  // Plotly config: no logo, no "share to the cloud", a short tool set, no drag-to-zoom on touch screens (a finger
  // must be able to scroll the page past it). One object: Plotly then keeps its mode bar instead of rebuilding it.
  const CONFIG = Object.freeze({
    responsive: true, displaylogo: false, showSendToCloud: false, showEditInChartStudio: false,
    displayModeBar: "hover", scrollZoom: false, doubleClick: "autosize", // double-click: the whole run
    modeBarButtons: [["zoom2d", "pan2d", "select2d", "zoomIn2d", "zoomOut2d", "autoScale2d"], ["toImage"]],
  });
  // Plotly draws the heatmap alone, off the first paint's path: the page names its bundle in <meta id="plotly-bundle"
  // content="its URL"> and the panel fetches it once it has something to draw (again after a failed load).
  let plotly = null;
  const loadPlotly = () => plotly || (plotly = new Promise((ok) => {
    document.head.appendChild(Obs.el("script", {src: document.getElementById("plotly-bundle").content, on: {
      load: () => { performance.mark("obs-plotly-loaded"); ok(); },
      error: () => { console.error("the heatmap's library failed to load"); plotly = null; }}}));
  }));

  class RouterPanel {
    constructor(ctx, routerMetric) {
      this.ctx = ctx;
      this.name = (layer, what) => routerMetric.replace("{layer}", layer).replace("{name}", what);
      const hist = this.name("LAYER", "routing_hist").replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
      this.histRe = new RegExp("^" + hist.replace("LAYER", "(\\d+)") + "/(\\d+)$");
      this.layers = new Map(); // layer -> Set(expert)
      this.layer = null;
      this.rows = []; // expert numbers shown, ascending
      this.experts = []; // Series per row
      this.lines = []; // [max_mean_load Series, capacity_overflow_rate Series]
      this.full = true; this.dirty = false; this.lastDraw = 0; this.timer = null;
      this.section = document.getElementById("router-panel");
      this.select = document.getElementById("router-layer");
      this.plot = document.getElementById("router-heatmap");
      this.note = document.getElementById("router-note");
      this.layerSelect = Obs.onCommit(this.select, (v) => this.setLayer(+v));
      this.section.querySelector(".table-alt").addEventListener("toggle", () => this.renderTable());
      this.visible = Obs.watchSeen(this.section, (seen) => { // drawn only on screen (caught up when scrolled into view)
        this.visible = seen;
        if (seen && this.dirty) this.ctx.schedule();
      });
    }

    // A series name the run has: routing_hist/<e> of some layer reveals that layer and expert.
    discover(name) {
      const m = this.histRe.exec(name);
      if (!m) return;
      const layer = +m[1], expert = +m[2];
      let set = this.layers.get(layer);
      if (!set) {
        set = new Set();
        this.layers.set(layer, set);
        const opts = [...this.layers.keys()].sort((a, b) => a - b);
        this.select.replaceChildren(...opts.map((l) => Obs.el("option", {value: l, text: "layer " + l})));
      }
      if (set.has(expert)) return;
      set.add(expert);
      this.section.hidden = false;
      if (this.layer === null) this.setLayer(Math.min(...this.layers.keys()));
      else if (layer === this.layer) this.setLayer(layer); // a new expert row
      if (this.layer !== null) this.layerSelect.set(this.layer);
    }

    setLayer(layer) {
      const old = [...this.experts, ...this.lines].map((s) => s.name);
      this.layer = layer;
      this.rows = [...this.layers.get(layer)].sort((a, b) => a - b);
      const store = this.ctx.store;
      this.experts = this.rows.map((e) => store.want(this.name(layer, "routing_hist") + "/" + e, this,
                                                     {points: EXPERT_POINTS, cap: EXPERT_CAP}));
      this.lines = ["max_mean_load", "capacity_overflow_rate"].map(
        (w) => store.want(this.name(layer, w), this, {points: LINE_POINTS}));
      const keep = new Set([...this.experts, ...this.lines].map((s) => s.name));
      for (const name of old) if (!keep.has(name)) store.release(name, this);
      this.layerSelect.set(layer);
      this.plot.dataset.layer = layer;
      this.zoom = null;
      this.reset();
      if (this.ctx.view.range) this.setRange(); // the new layer's window of the zoomed range
    }

    reset() { this.full = true; this.dirty = true; this.ctx.schedule(); }

    added(s, add) {
      this.dirty = true;
      const row = this.experts.indexOf(s);
      if (!this.full && row >= 0) {
        for (let i = 0; i < add.x.length; i++) if (this.inView(add.x[i])) this.put(row, add.x[i], add.y[i]);
        for (let i = 0; i < add.nfx.length; i++) this.nf.push([add.nfx[i], this.rows[row], add.nfk[i]]);
        if (this.hi - this.lo + 1 > MAX_COLS) { this.full = true; this.shrink = true; }
      }
      this.ctx.schedule();
    }

    put(row, step, v) {
      const k = Math.floor(step / this.W);
      let col = this.cols.get(k);
      if (!col) { col = new Array(this.rows.length).fill(null); this.cols.set(k, col); }
      if (col[row] === null || v > col[row]) col[row] = v;
      if (k < this.lo) this.lo = k;
      if (k > this.hi) this.hi = k;
    }

    // The dashboard's visible range changed (any chart's zoom, the step fields, the URL): read each expert's and
    // line's window at the panel's resolution (debounced, stale reads cancelled), then re-bin over that window
    // only; back to the whole run when the range is cleared.
    setRange() {
      clearTimeout(this.zoomTimer);
      if (this.abort) { this.abort.abort(); this.abort = null; }
      const range = this.ctx.view.range;
      if (!range || this.layer === null) { this.zoom = null; this.reset(); return; }
      this.zoomTimer = setTimeout(() => this.fetchZoom(range), 16);
    }

    async fetchZoom(range) {
      const ac = this.abort = new AbortController(), store = this.ctx.store, [a, b] = range;
      const read = (s, pts) => store.window(s.name, a, b, pts, ac.signal);
      try {
        const got = await Promise.all([...this.experts.map((s) => read(s, MAX_COLS)),
                                       ...this.lines.map((s) => read(s, LINE_POINTS))]);
        if (ac !== this.abort) return;
        const ws = got.map((w) => w || Obs.emptyWindow());
        this.zoom = {range: [a, b], experts: ws.slice(0, this.experts.length), lines: ws.slice(this.experts.length)};
      } catch (e) {
        if (e.name === "AbortError") return;
        console.warn("router heatmap zoom failed:", e); // drawn from the held history instead
        this.zoom = null;
      }
      this.abort = null;
      this.reset();
    }

    inView(step) { return !this.zoom || (step >= this.zoom.range[0] && step <= this.zoom.range[1]); }

    // Bin every held point again: after a history load, a rewind, a new expert, or too many columns.
    rebuild() {
      let lo = Infinity, hi = -Infinity, bucket = 1;
      const src = this.zoom ? this.zoom.experts : this.experts;
      if (this.zoom) [lo, hi] = this.zoom.range; // the zoomed window, edge to edge
      for (const s of src) {
        for (const xs of this.zoom ? [] : [s.steps, s.nfSteps]) {
          if (xs.length) { lo = Math.min(lo, xs[0]); hi = Math.max(hi, xs[xs.length - 1]); }
        }
        bucket = Math.max(bucket, s.bucketSteps || 1);
      }
      const span = hi >= lo ? hi - lo + 1 : 1;
      const target = this.shrink ? MAX_COLS / 2 : MAX_COLS; // leave room for live columns after a re-bin
      // A bin narrower than two history buckets can fall between one bucket's min and max: a false hole.
      this.W = Math.max(bucket > 1 ? 2 * bucket : 1, Math.ceil(span / target));
      this.shrink = false;
      this.cols = new Map();
      this.lo = Infinity; this.hi = -Infinity;
      this.nf = [];
      src.forEach((s, row) => {
        for (let i = 0; i < s.steps.length; i++) if (this.inView(s.steps[i])) this.put(row, s.steps[i], s.values[i]);
        for (let i = 0; i < s.nfSteps.length; i++) this.nf.push([s.nfSteps[i], this.rows[row], s.nfKinds[i]]);
      });
      this.full = false;
    }

    redraw() {
      if (!this.dirty || this.layer === null || !this.visible) return;
      if ([...this.experts, ...this.lines].some((s) => s.loading)) { // one draw once the layer's history is in
        this.note.textContent = "loading layer " + this.layer + "…";
        return; // the last load's reset() schedules the redraw
      }
      const wait = this.lastDraw + MIN_REDRAW_MS - performance.now();
      if (wait > 0) {
        if (!this.timer) this.timer = setTimeout(() => { this.timer = null; this.ctx.schedule(); }, wait);
        return;
      }
      if (!window.Plotly) { loadPlotly().then(() => this.ctx.schedule()); return; } // drawn once it is in
      this.dirty = false;
      this.lastDraw = performance.now();
      if (this.full) this.rebuild();
      Plotly.react(this.plot, this.traces(), this.layout(), CONFIG);
      Obs.toolbarA11y(this.plot, "Router heatmap tools");
      if (!this.relayoutBound && this.plot.on) { // a drag-zoom on the heatmap zooms the whole dashboard
        this.relayoutBound = true;
        this.plot.on("plotly_relayout", (ev) => {
          if (ev["xaxis.autorange"]) return this.ctx.zoomTo(null);
          const r = ev["xaxis.range"] || ("xaxis.range[0]" in ev ? [ev["xaxis.range[0]"], ev["xaxis.range[1]"]] : null);
          if (r) this.ctx.zoomTo([r[0], r[1]]);
        });
      }
      this.summarise();
      if (this.section.querySelector(".table-alt").open) this.renderTable();
    }

    traces() {
      const W = this.W, t = Obs.theme();
      const keys = [];
      for (let k = this.lo; k <= this.hi; k++) keys.push(k); // contiguous: a column nobody reported is visible
      const x = keys.map((k) => k * W + (W - 1) / 2);
      const empty = new Array(this.rows.length).fill(null);
      const z = this.rows.map((_, r) => keys.map((k) => (this.cols.get(k) || empty)[r]));
      this.missing = 0;
      const holes = z.map((row) => row.map((v) => (v === null ? (this.missing++, 1) : null)));
      const bin = W > 1 ? "steps %{x} ± " + (W / 2) + " (max in bin)" : "step %{x}";
      const [mml, ovf] = this.zoom ? this.zoom.lines.map((w, i) => ({...w, name: this.lines[i].name})) : this.lines;
      const lineMarks = (s, axisY) => ({x: s.nfSteps.slice(), y: s.nfSteps.map(() => 1), text: s.nfKinds.slice(),
        type: "scatter", mode: "markers", yaxis: axisY, showlegend: false, marker: {color: t.red, symbol: "x", size: 8},
        hovertemplate: s.name.split("/").pop() + " step %{x}: %{text}<extra></extra>"});
      this.keys = keys; this.z = z;
      return [
        {type: "heatmap", x, y: this.rows.slice(), z, colorscale: "Viridis", zmin: 0, hoverongaps: false,
         colorbar: {title: {text: "tokens", side: "right"}, len: 0.62, y: 1, yanchor: "top", thickness: 10, x: 1.01},
         hovertemplate: "expert %{y}<br>" + bin + "<br>%{z} tokens<extra></extra>", name: "tokens"},
        {type: "scatter", mode: "markers", x: this.nf.map((p) => p[0]), y: this.nf.map((p) => p[1]),
         text: this.nf.map((p) => p[2]), marker: {color: t.red, symbol: "x", size: 9}, showlegend: false,
         name: "non-finite", hovertemplate: "expert %{y} step %{x}: %{text}<extra></extra>"},
        {type: "scatter", mode: "lines", x: mml.steps.slice(), y: mml.values.slice(), yaxis: "y2",
         name: "max/mean load", line: {color: "#d9730d", width: 1.3},
         hovertemplate: "max/mean load<br>step %{x}<br>%{y}<extra></extra>"},
        {type: "scatter", mode: "lines", x: ovf.steps.slice(), y: ovf.values.slice(), yaxis: "y3",
         name: "capacity overflow", line: {color: "#c2185b", width: 1.1, dash: "dot"},
         hovertemplate: "capacity overflow<br>step %{x}<br>%{y:.2%}<extra></extra>"},
        lineMarks(mml, "y4"), lineMarks(ovf, "y4"),
        {type: "heatmap", x, y: this.rows.slice(), z: holes, showscale: false, hoverongaps: false,
         colorscale: [[0, t.missing], [1, t.missing]], name: "no data",
         hovertemplate: "expert %{y}<br>" + bin + "<br>no data: nothing reported<extra></extra>"},
        {type: "scatter", mode: "markers", x: [null], y: [null], name: "no data (nothing reported)",
         marker: {symbol: "square", size: 11, color: t.missing}, hoverinfo: "skip", showlegend: this.missing > 0},
        {type: "scatter", mode: "markers", x: [null], y: [null], name: "non-finite load", hoverinfo: "skip",
         marker: {symbol: "x", size: 9, color: t.red}, showlegend: this.nf.length > 0},
      ];
    }

    layout() {
      const t = Obs.theme();
      const ax = {gridcolor: t.grid, zerolinecolor: t.grid, automargin: true, tickfont: {color: t.muted}};
      return {
        margin: {l: 55, r: 60, t: 8, b: 30}, hovermode: "closest",
          uirevision: "layer-" + this.layer + (this.zoom ? "-" + this.zoom.range.join("-") : ""),
        paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)", font: {color: t.fg},
        dragmode: Obs.coarsePointer() ? false : "zoom",
        showlegend: true, legend: {orientation: "h", x: 0, y: -0.2, yanchor: "top", font: {size: 10}},
        xaxis: {...ax, title: {text: "step"}, anchor: "y2",
                ...(this.zoom ? {range: [this.zoom.range[0] - 0.5, this.zoom.range[1] + 0.5], autorange: false}
                              : {autorange: true})},
        yaxis: {...ax, domain: [0.4, 1], title: {text: "expert"}, dtick: this.rows.length <= 32 ? 1 : undefined,
                tickfont: {size: 9, color: t.muted}},
        yaxis2: {...ax, domain: [0, 0.3], title: {text: "max/mean", font: {size: 10}}, rangemode: "tozero"},
        yaxis3: {...ax, overlaying: "y2", side: "right", tickformat: ".2~%", rangemode: "tozero", showgrid: false,
                 title: {text: "overflow", font: {size: 10}}},
        yaxis4: {overlaying: "y2", range: [0, 1.05], visible: false, fixedrange: true},
      };
    }

    summarise() {
      const [mml, ovf] = this.lines;
      const nf = this.experts.reduce((a, s) => a + s.nfTotal, 0) + mml.nfTotal + ovf.nfTotal;
      const lm = mml.lastValue(), lo = ovf.lastValue(), W = this.W, n = this.keys.length;
      const parts = [`${this.rows.length} experts`, W > 1 ? `${n} bins of ${W} steps` : `${n} steps`];
      if (lm) parts.push(`max/mean ${typeof lm[1] === "number" ? Obs.fmt(lm[1]) : lm[1]} @ ${lm[0]}`);
      if (lo) parts.push(`overflow ${typeof lo[1] === "number" ? (100 * lo[1]).toFixed(2) + "%" : lo[1]}`);
      if (this.missing) parts.push(`${this.missing} cells without data (grey)`);
      this.note.textContent = parts.join(" · ");
      document.getElementById("router-nonfinite").textContent = nf ? nf + " non-finite" : "";
    }

    renderTable() { // the latest column and each expert's busiest bin, per expert
      const det = this.section.querySelector(".table-alt");
      if (!det.open || !this.z) return;
      const last = this.keys.length - 1;
      const cols = [
        {label: "tokens in the latest bin", steps: this.rows, values: this.z.map((r) => (last >= 0 ? r[last] : null))},
        {label: "busiest bin (tokens)", steps: this.rows,
         values: this.z.map((r) => r.reduce((m, v) => (v !== null && (m === null || v > m) ? v : m), null))},
      ];
      Obs.renderTable(det.querySelector(".table-wrap"), `Router load of layer ${this.layer} by expert`, cols, 1000);
      det.querySelector("th[scope=col]").textContent = "expert";
    }
  }

  Obs.RouterPanel = RouterPanel;
})(window.Obs);
