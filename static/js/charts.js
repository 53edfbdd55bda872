// Line charts over Obs.Store series: one line per series (the first is the chart's own metric), extra lines
// joining as the run reveals them (per-domain losses), an optional right-hand axis (MFU next to tokens/s).
// A chart is its data model and a draw call: traces() and layout() make the figure (plain data, plot.js's format)
// from the store's series, the zoom's window and the marks; redraw() hands it to Obs.drawFigure (uPlot, canvas).
// Zoom is real (zoom.js): a zoomed chart draws its window's finer points between the coarse history on either side,
// live points still join, and the y axis fits the visible window.
// Trace order (tests and feature modules rely on it): lines 0..n-1, non-finite marks n..2n-1, impossible-value
// marks 2n..3n-1, smoothed lines 3n..4n-1 (only while smoothing is on; the raw lines then stay faint behind), then
// the traces of feature modules (Obs.setTraces: forecast.js's band).
// Non-finite points are red ✕ at the top of the chart; values no hardware can produce (page bounds: MFU above
// 100%) are amber ▲ there, never part of the line; both are counted in the chart's note, nothing is dropped.
// Drawing is only for what is seen: a chart off screen draws nothing until it is scrolled into view (then all it
// missed at once); a line longer than four points a pixel is drawn at its min and max per pixel (spikes kept, as
// the server's pyramid does: Obs.minmax).
"use strict";

window.Obs = window.Obs || {};
// Why charts redraw (bench/liveview.py reports it): full redraws (new figure), redraws for live points only, and
// of those the ones that drew the new segments alone (chartlive.js, livedraw.js).
window.Obs.redrawCounts = {full: 0, remark: 0, append: 0, tail: 0};

(function (Obs) {
  const LIVE_HEADROOM = 0.04; // a live chart's x axis reaches at least this fraction of its span past the data,
  const LIVE_AHEAD_S = 120; // and room for this long at the observed live rate,
  const LIVE_AHEAD_MAX = 0.25; // at most this fraction of the span
  const TABLE_ROWS = 1000;
  const LABEL_ROW_PX = 22; // the room above the plot for marker labels (rewinds, overlays), kept with or without one
  const AXIS_PX = 34; // a y axis's least width (its tick labels widen it: plot.js)
  const EMPTY = {steps: [], values: [], nfSteps: [], nfKinds: []};
  const BUSY = {starting: "the run is starting… (data, model)", compiling: "compiling… the first step follows"};
  const merge = (a, b, from, to) => Obs.mergeWindow(a, b, from, to); // (chartmodel.js)

  // Plot sizes read in one layout, not one forced layout a chart (a read after another chart's DOM writes): the first
  // read of a task measures every chart's plot; one built later in the task takes a measured sibling's size (equal
  // grid columns, CSS heights). Valid until the task ends; each plot's ResizeObserver corrects.
  const alive = new Set();
  let sized = null; // plot -> [width, height, the chart box's parent], this task's
  function plotSize(chart, build) {
    if (!sized) { sized = new Map(); queueMicrotask(() => { sized = null; }); }
    const read = (c) => [c.plot.clientWidth, c.plot.clientHeight, c.box.parentNode];
    let s = sized.get(chart.plot);
    if (!s && build) for (const v of sized.values()) if (v[2] === chart.box.parentNode && v[0]) { s = v; break; }
    if (!s) {
      for (const c of alive) if (c.plot.isConnected) sized.set(c.plot, read(c));
      s = sized.get(chart.plot) || read(chart);
    }
    return s;
  }

  // Whether a chart of `spec` draws series `name`: one of its metrics, an optional one, or a series right under its
  // prefix (per-domain losses). anomalies.js marks an anomaly on the chart that draws its series.
  Obs.chartDraws = (spec, name) => {
    const p = spec.extra_prefix;
    return (spec.metrics || []).includes(name) || (spec.optional || []).includes(name) ||
      (!!p && name.startsWith(p) && name.length > p.length && !name.slice(p.length).includes("/"));
  };

  class LineChart {
    // ctx: {store, schedule, view, xaxis, registry, bounds, rewinds, chartAction, zoomDrawn}; spec: {id?, title,
    // metrics, optional, extra_prefix, secondary, topic, note}; parent: the element the chart is appended to.
    constructor(ctx, spec, parent) {
      this.ctx = ctx;
      this.id = spec.id || spec.metrics[0];
      this.spec = spec;
      this.secondary = new Set(spec.secondary || []);
      this.items = []; // {name, metric, store, series, index, secondary, zoom, buf}
      this.full = true; this.dirty = true; this.lastFull = 0;
      this.rangeRev = 0; this.stale = false; this.abort = null; this.zoomPending = false;
      this.visible = this.observed = !window.IntersectionObserver; // (the observer says so once it has looked)
      this.live = false; // live points have arrived: the x axis keeps headroom for the next ones
      this.info = ctx.registry.info(this.id);
      this.build(parent);
      alive.add(this);
      const [w, h] = plotSize(this, true);
      this.width = w || 600; this.height = h || 260;
      for (const name of spec.metrics) this.addTrace(name); // history requests first: they overlap the drawing
      if (window.ResizeObserver) {
        new ResizeObserver(() => {
          const w = this.plot.clientWidth, h = this.plot.clientHeight;
          if ((w && w !== this.width) || (h && h !== this.height)) {
            this.width = w || this.width; this.height = h || this.height;
            if (this.lastFull) { this.full = true; this.dirty = true; this.ctx.schedule(); }
          }
        }).observe(this.plot);
      }
      this.plot.addEventListener("pointerenter", () => { // hover values from the first pointer on
        this.pointer = true;
        if (this.plot.layout) this.plot.layout.hovermode = "x unified";
      });
      Obs.watchSeen(this.box, (seen) => { // (its first answer: this.visible above)
        this.visible = seen; this.observed = true;
        if (seen && this.stale) this.setRange();
        else this.ctx.schedule(); // catch up on what came while off screen (and first paint counts it)
      });
    }

    build(parent) {
      const slug = Obs.slug(this.id), title = this.spec.title || this.info.title, el = Obs.el, m = this.info.meaning;
      const gloss = this.ctx.registry.glossary(this.spec.topic || this.info.topic);
      const tool = (cls, text, label, fn, attrs) => el("button", {type: "button", class: "tool " + cls, text,
                                                                  title: label, attrs: {"aria-label": label, ...attrs},
                                                                  on: {click: fn}});
      const act = (action) => () => this.ctx.chartAction(this.id, action);
      this.els = { // (written or read at every redraw)
        note: el("span", {class: "note", attrs: {role: "status"}}),
        log: tool("log", "log y", "log y (logarithmic axis) for " + title, () => this.ctx.view.toggleLog(this.id),
                  {"aria-pressed": "false"}),
        table: el("details", {class: "table-alt", on: {toggle: () => this.renderTable()}},
                  el("summary", {text: "Data table"}), el("div", {class: "table-wrap", tabIndex: 0}))};
      const tools = el("div", {class: "chart-tools", attrs: {role: "group", "aria-label": "Chart: " + title}},
                       this.els.log, tool("up", "↑", "Move " + title + " earlier", act("up")),
                       tool("down", "↓", "Move " + title + " later", act("down")),
                       tool("remove", "✕", "Remove the " + title + " chart", act("remove")));
      this.plot = el("div", {class: "plot", id: "chart-" + slug});
      this.box = el("figure", {class: "chart", "data-metric": this.id,
                               attrs: {"aria-labelledby": "title-" + slug, "aria-describedby": "meaning-" + slug}},
        el("div", {class: "chart-head"},
           el("h3", {id: "title-" + slug}, el("span", {class: "name", text: title, title: this.id}), " ",
              el("span", {class: "unit", text: this.info.unit ? "(" + this.info.unit + ")" : ""})),
           this.els.note, tools),
        el("p", {class: "meaning", id: "meaning-" + slug, text: m ? m[0].toUpperCase() + m.slice(1) + "." : this.id}),
        this.plot,
        el("details", {class: "glossary", hidden: !gloss}, el("summary", {text: "What is this?"}),
           el("p", {text: gloss})),
        this.els.table);
      this.title = title;
      if (Obs.downloadMenu) Obs.downloadMenu(this, tools); // (downloads.js)
      parent.appendChild(this.box);
    }

    // Does series `name` belong here as an extra trace (once the run has it)?
    wants(name) { return !this.items.some((it) => it.name === name) && Obs.chartDraws(this.spec, name); }

    resolution() { // points per window = the plot's pixel width: a bucket's min and max every two pixels
      return Math.max(100, Math.min(4000, Math.round(this.width || 600))); // (cached: reading it forces a layout)
    }

    addTrace(name) {
      if (this.items.some((it) => it.name === name)) return;
      const item = {name, metric: name, store: this.ctx.store, index: this.items.length,
                    secondary: this.secondary.has(name), zoom: null};
      this.items.push(item);
      item.series = item.store.want(name, this, {points: this.resolution()});
      this.full = true; this.dirty = true;
      this.ctx.schedule();
    }
    destroy() {
      for (const it of this.items) it.store.release(it.metric, this);
      if (this.abort) this.abort.abort();
      alive.delete(this);
      Obs.figurePurge(this.plot);
      this.box.remove();
    }

    reset(s, toStep) {
      if (toStep !== undefined) { // a rewind: zoomed, buffered and queued live points past it are superseded too
        for (const it of this.items) {
          if (it.series !== s) continue;
          if (it.zoom) Obs.cutAfter(it.zoom, toStep);
          if (it.buf) it.buf.cutAfter(this.ctx.xaxis.xOf(toStep));
        }
        if (this.adds) this.adds.length = 0; // (the full redraw below reads the store's points again)
      }
      const it = this.items.find((i) => i.series === s);
      // history came in while zoomed: read the window's finer points too
      if (this.ctx.view.range && toStep === undefined && it && !it.zoom && s.bucketSteps > 1) this.setRange();
      this.full = true; this.dirty = true; this.ctx.schedule();
    }

    added(s, add) {
      this.dirty = true; this.live = true;
      const last = add.x.length ? add.x[add.x.length - 1] : undefined;
      if (last !== undefined) { // the live rate, for the x axis's room ahead
        const now = performance.now();
        if (!this.liveFrom) this.liveFrom = {t: now, step: last};
        else if (last > this.liveFrom.step) this.liveTo = {t: now, step: last};
      }
      this.appended = true;
      this.queueAdd(s, add); // (chartlive.js)
      this.ctx.schedule();
    }

    label(name) {
      const p = this.spec.extra_prefix;
      if (p && name.startsWith(p)) return name.slice(p.length);
      return this.items.length > 1 ? this.ctx.registry.info(name).title : this.title;
    }

    data(it) { // what the chart draws of a series: the held history, with the zoomed window's finer points
      const s = it.series;
      if (!s || s.waiting) return EMPTY;
      return it.zoom ? merge(s, it.zoom, it.zoom.from, it.zoom.to) : s;
    }

    // Split finite points into drawable ones and ones beyond the metric's physical bound.
    split(name, steps, values) {
      const b = this.ctx.bounds[name];
      // copies: the figure's arrays are the chart's own, never the store's
      if (!b || !values.some((v) => v > b.max)) return {x: steps.slice(), y: values.slice(), ox: [], oy: []};
      const out = {x: [], y: [], ox: [], oy: []};
      values.forEach((v, i) => { if (v > b.max) { out.ox.push(steps[i]); out.oy.push(v); }
                                 else { out.x.push(steps[i]); out.y.push(v); } });
      return out;
    }

    // What a subclass changes (a compare chart, comparechart.js: a line per run): the items drawn, x from an item's
    // steps and back, whether an item can be drawn on this x axis, a line's legend names (raw, smoothed).
    shown() { return this.items; }
    xOf(it, steps) { return this.ctx.xaxis.toX(steps); }
    stepOf(it, x) { return x; } // (the view's range is in steps)
    drawable() { return true; }
    names(label) { return [label, label + " (smoothed)"]; }

    traces() {
      const sm = this.ctx.view.smooth, multi = this.items.length > 1, t = Obs.theme();
      const log = this.ctx.view.log.has(this.id);
      const lines = [], marks = [], oob = [], smooth = [];
      this.oobTotal = 0; this.nonPositive = 0;
      for (const it of this.shown()) {
        const d = this.data(it), p = this.split(it.name, d.steps, d.values);
        if (p.x.length > 4 * this.resolution()) [p.x, p.y] = Obs.minmax(p.x, p.y, this.resolution());
        const unit = this.ctx.registry.info(it.metric).unit, label = this.label(it.name);
        const [raw, smoothed] = this.names(label, sm > 0), X = this.xOf(it, p.x), yaxis = it.secondary ? "y3" : "y";
        const line = {width: multi && it.metric === this.id ? 1.5 : 1, color: Obs.lineColor(it.index), // (1: a
                      dash: it.secondary ? "dot" : "solid"}; // hairline, ~2x cheaper a live redraw; own metric wider)
        lines.push({x: X, y: p.y, mode: "lines", name: raw, yaxis, unit, showlegend: multi && !sm,
                    opacity: sm > 0 ? 0.28 : 1, line});
        marks.push({x: this.xOf(it, d.nfSteps), y: d.nfSteps.map(() => 1), text: d.nfKinds.slice(), yaxis: "y2",
                    mode: "markers", showlegend: false, name: label + " non-finite",
                    marker: {color: t.red, symbol: "x", size: 9}});
        oob.push({x: this.xOf(it, p.ox), y: p.ox.map(() => 1), text: p.oy.map((v) => Obs.fmt(v)), yaxis: "y2",
                  mode: "markers", showlegend: false, name: label + " impossible",
                  marker: {color: t.amber, symbol: "triangle-up-open", size: 9}});
        this.oobTotal += p.ox.length;
        if (log) this.nonPositive += p.y.filter((v) => v <= 0).length;
        if (sm > 0) {
          smooth.push({x: X, y: Obs.ema(p.y, sm), mode: "lines", name: smoothed, yaxis, unit, showlegend: multi,
                       line: {...line, width: 1.8}});
        }
      }
      return [...lines, ...marks, ...oob, ...smooth, ...Obs.tracesFor(this)]; // then feature modules' (plotkit.js)
    }

    layout(traces) {
      const t = Obs.theme(), xa = this.ctx.xaxis, view = this.ctx.view;
      const multi = this.items && this.items.length > 1;
      const sec = this.items && this.items.some((it) => it.secondary);
      const log = view.log.has(this.id);
      const range = view.range ? xa.toX([view.range[0], view.range[1]]) : null;
      const lay = {margin: this.margins(traces, sec, multi, xa.mode === "time"), showlegend: !!multi,
                   hovermode: this.pointer ? "x unified" : false, dragmode: Obs.coarsePointer() ? false : "zoom",
                   xaxis: {title: {text: xa.title()}, type: xa.axisType()},
                   yaxis: {type: log ? "log" : "linear"}};
      if (range) { lay.xaxis.range = range; lay.xaxis.autorange = false; } else lay.xaxis.autorange = true;
      if (!range && traces && this.liveish() && xa.mode !== "time") this.headroom(lay.xaxis, traces);
      if (sec) {
        const second = this.items.filter((it) => it.secondary), names = second.map((it) => this.label(it.name));
        const fractions = second.every((it) => this.ctx.registry.info(it.name).unit === "fraction"); // MFU: 21%
        lay.yaxis3 = {type: "linear", title: {text: names.join(", ")}, ...(fractions ? {tickformat: ".1~%"} : {})};
      }
      this.marks(lay, t, traces);
      return lay;
    }

    // Room for the right-hand axis's title and the legend's rows above the plot. The y axes are as wide as their
    // tick labels as drawn (plot.js measures them): AXIS_PX is their least width.
    margins(traces, sec, multi, time) {
      let top = this.labelRow() ? LABEL_ROW_PX : 8; // marker labels (rewinds, overlays) sit just above the plot
      if (multi) { // the legend's rows (plot.js lays them out, left of the tool bar): the names it will show
        const names = traces ? traces.filter((t) => t.mode === "lines" && t.showlegend !== false && t.name)
          .map((t) => t.name) : this.items.map((it) => this.label(it.name));
        const rows = Obs.legendRows(names, this.width || 600);
        top += rows ? 4 + 16 * rows : 0; // (a row: 10 px text at the page's line height, .1rem apart)
      }
      return {l: AXIS_PX, r: sec ? AXIS_PX + 14 : 12, t: top, b: time ? 52 : 38};
    }

    labelRow() { return true; } // the row for marker labels is kept (LABEL_ROW_PX); a chart that has none: false

    // Live points are coming (or will: the run trains and its trainer's heartbeat gives a rate): the axes keep room
    // for them, drawn in place.
    liveish() { return this.live || (this.ctx.runState === "training" && this.ctx.stepsPerS > 0); }

    headroom(axis, traces) { // a live chart's x axis: the run so far and room for the next points past it
      const [lo, hi] = Obs.xExtent(traces);
      if (!(hi > lo)) return;
      let ahead = (hi - lo) * LIVE_HEADROOM, perS = 0;
      const a = this.liveFrom, b = this.liveTo, sps = this.ctx.stepsPerS;
      if (a && b && b.t - a.t > 2000) { // x units a second, from the live points seen so far
        const [xa, xb] = this.ctx.xaxis.toX([a.step, b.step]);
        perS = (xb - xa) / ((b.t - a.t) / 1000);
      } else if (sps > 0) { // else from the trainer's heartbeat (its steps/s)
        const s = this.items[0] && this.items[0].series;
        const at = a ? a.step : s && s.steps.length ? s.steps[s.steps.length - 1] : 0;
        const [xa, xb] = this.ctx.xaxis.toX([at, at + sps * 10]);
        perS = (xb - xa) / 10;
      }
      if (perS > 0) ahead = Math.min((hi - lo) * LIVE_AHEAD_MAX, Math.max(ahead, perS * LIVE_AHEAD_S));
      axis.range = [lo, hi + ahead];
      axis.autorange = false;
    }

    // ---------------------------------------------------------------------------------------- drawing
    redraw() {
      if (!this.dirty || !this.visible) return; // off screen: drawn once scrolled into view
      if (!this.lastFull && this.items.some((it) => it.series && it.series.loading)) return; // its reset() calls
      const now = performance.now(), C = Obs.redrawCounts, wasFull = this.full || !this.lastFull;
      this.dirty = false;
      if (!wasFull && (this.appended || this.remark) && this.appendLive()) { // live points, marks: the cheap path
        C[this.appended ? "append" : "remark"]++; this.appended = false;
        if (this.els.table.open && now - (this.tableAt || 0) > 1000) this.renderTable();
        return;
      }
      C[this.full ? "full" : this.appended ? "append" : "remark"]++;
      this.remark = false;
      const traces = this.traces();
      Obs.drawFigure(this.plot, traces, this.layout(traces), this.handlers || (this.handlers = {
        zoom: (a, b) => this.relayouted({"xaxis.range": [a, b]}),
        reset: () => this.relayouted({"xaxis.autorange": true}),
        label: (id) => this.clickedLabel(id), toolbarLabel: "Chart tools: " + this.title,
        // (ctx.zoomTo: the page's own zoom; the compare page has no Obs.zoomTo, the dashboard's global)
        toolbar: [{text: "⤢", label: "Zoom out to the whole run", fn: () => this.ctx.zoomTo(null)}, Obs.PNG_TOOL]}),
      plotSize(this));
      this.lastFull = now;
      this.full = false; this.appended = false;
      this.fill(traces); // (chartlive.js: the live points' buffers)
      this.note();
      if (Obs.downloadLinks && wasFull) Obs.downloadLinks(this); // (what they link to changes with a full redraw)
      if (this.zoomPending && !this.fetching) { this.zoomPending = false; this.ctx.zoomDrawn(this); }
      if (this.els.table.open && now - (this.tableAt || 0) > 1000) this.renderTable();
    }

    note() {
      const nf = this.items.reduce((a, it) => a + (it.series ? it.series.nfTotal : 0), 0);
      const waiting = this.items.length && this.items.every((it) => !it.series || it.series.waiting);
      const empty = this.items.every((it) => it.series && it.series.loaded &&
                                             it.series.steps.length + it.series.nfSteps.length === 0);
      const parts = [];
      if (nf) parts.push(nf + " non-finite ✕");
      if (this.oobTotal) parts.push(this.oobTotal + " impossible ▲ (" + (this.ctx.bounds[this.items.find(
        (it) => this.ctx.bounds[it.name]).name] || {}).why + ")");
      if (this.nonPositive) parts.push(this.nonPositive + " values ≤ 0 not drawn on the log axis");
      if (this.spec.note) parts.push(this.spec.note);
      const busy = BUSY[this.ctx.runState]; // the trainer's state while it has no step yet (dashboard.js showRun)
      if (!parts.length && busy && (waiting || empty)) parts.push(busy);
      else if (!parts.length && waiting) parts.push("waiting for the run to publish it");
      else if (!parts.length && empty) parts.push("no data yet");
      const el = this.els.note;
      Obs.put(el, parts.join(" · "));
      const bad = nf > 0 || this.oobTotal > 0;
      if (el.classList.contains("bad") !== bad) el.classList.toggle("bad", bad);
      Obs.putAttr(this.els.log, "aria-pressed", this.ctx.view.log.has(this.id));
    }

    renderTable() { // a zoomed view: each line's points inside the range
      const det = this.els.table;
      if (!det.open) return;
      this.tableAt = performance.now();
      const range = this.ctx.view.range;
      const cols = this.items.map((it) => Obs.tableColumn(this.data(it), this.label(it.name),
        ...(range && this.drawable(it) ? range.map((x) => this.stepOf(it, x)) : [])));
      Obs.renderTable(det.querySelector(".table-wrap"), `${this.title}, ${this.where(range)}`, cols, TABLE_ROWS);
    }

    where(range) { return range ? `steps ${Math.floor(range[0])}–${Math.ceil(range[1])}` : "the whole run"; }
  }
  Obs.LineChart = LineChart;
})(window.Obs);
