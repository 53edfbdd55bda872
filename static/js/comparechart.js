// A compare chart: one metric, one line per run (Obs.RunLine), each run's steps mapped onto the shared x axis by
// its own Obs.XAxis. It is an Obs.LineChart (charts.js, zoom.js): the same card, tools, y fitting, data table,
// debiased-EMA smoothing with the raw line faint behind, and the same real zoom — a zoom reads each run's window
// at the plot's pixel width (min/max buckets), mapped from the shared x range to that run's own steps.
// Items: {name: the run's legend label, run, series, zoom, ema}; trace order as in charts.js (lines, non-finite
// marks, impossible-value marks (none here), smoothed lines), one of each per run that can be drawn.
"use strict";

(function (Obs) {
  const AXIS_WORD = {tokens: "token count", time: "timestamps"};

  class CompareChart extends Obs.LineChart {
    // ctx: {runs(): [RunLine], view: CompareView, xaxis: the shared axis (x units), registry, bounds: {},
    //       rewinds: [], schedule, chartAction, zoomTo, zoomDrawn}
    constructor(ctx, id, parent) {
      const info = ctx.registry.info(id);
      super(ctx, {id, metrics: [], title: info.title, topic: info.topic}, parent);
      this.offAxis = [];
      this.syncRuns();
    }

    // Make the lines follow the runs compared (added, removed, reordered: colours follow the order).
    syncRuns() {
      const runs = this.ctx.runs();
      for (const it of this.items) if (!runs.includes(it.run)) it.run.store.release(this.id, this);
      this.items = runs.map((run) => this.items.find((it) => it.run === run) ||
        {run, zoom: null, ema: null, secondary: false,
         series: run.store.want(this.id, this, {points: this.resolution()})});
      this.items.forEach((it) => { it.index = it.run.index; it.name = it.run.label; });
      if (this.ctx.view.range) this.setRange(); // new lines read the zoomed window too
      this.full = true; this.dirty = true; this.ctx.schedule();
    }

    destroy() {
      for (const it of this.items) it.run.store.release(this.id, this);
      this.items = [];
      if (this.abort) this.abort.abort();
      Obs.figurePurge(this.plot);
      this.box.remove();
    }

    label(name) { return name; } // items are named by their run

    labelRow() { return false; } // (a comparison has no marks: no rewinds, no overlays)

    drawable(it) { return it.run.supports(this.ctx.view.x); }

    traces() {
      const sm = this.ctx.view.smooth, t = Obs.theme(), logY = this.ctx.view.log.has(this.id), unit = this.info.unit;
      const lines = [], marks = [], smooth = [];
      this.oobTotal = 0; this.nonPositive = 0; this.offAxis = [];
      for (const it of this.items) {
        if (!it.series || it.series.waiting || it.series.missing) continue; // the run has no such series
        if (!this.drawable(it)) { this.offAxis.push(it.name); continue; }
        const d = this.data(it), X = it.run.toX(d.steps), c = Obs.color(it.index);
        lines.push({x: X, y: d.values.slice(), mode: "lines", unit, // the legend names runs: the smoothed lines' then
                    name: sm > 0 ? it.name + " (raw)" : it.name, showlegend: !sm, opacity: sm > 0 ? 0.28 : 1,
                    line: {width: 1.5, color: c}});
        marks.push({x: it.run.toX(d.nfSteps), y: d.nfSteps.map(() => 1), text: d.nfKinds.slice(), yaxis: "y2",
                    mode: "markers", showlegend: false, name: it.name + " non-finite",
                    marker: {color: t.red, symbol: "x", size: 9, line: {color: c, width: 1}}});
        if (logY) this.nonPositive += d.values.filter((v) => v <= 0).length;
        if (sm > 0) {
          it.ema = Obs.ema(d.values, sm);
          smooth.push({x: X, y: it.ema.y, mode: "lines", name: it.name, showlegend: true, unit,
                       line: {width: 1.8, color: c}});
        }
      }
      const oob = lines.map(() => ({x: [], y: [], mode: "markers", yaxis: "y2", showlegend: false}));
      return [...lines, ...marks, ...oob, ...smooth];
    }

    layout(traces) {
      const lay = super.layout(traces), view = this.ctx.view, xa = lay.xaxis;
      if (view.logx) {
        xa.type = "log";
        if (xa.range) xa.range = xa.range.map((v) => Math.log10(Math.max(v, 1e-9)));
      } else if (view.x === "time") { // seconds since each run's start, labelled as durations
        let lo = Infinity, hi = -Infinity;
        if (view.range) [lo, hi] = view.range;
        else for (const tr of traces || []) if (tr.mode === "lines" && tr.x.length) {
          lo = Math.min(lo, tr.x[0]); hi = Math.max(hi, tr.x[tr.x.length - 1]);
        }
        Object.assign(xa, Obs.durationTicks(lo, hi, this.width < 500 ? 3 : 6) || {});
      }
      return lay;
    }

    coarse() { return super.coarse().filter((it) => this.drawable(it)); }

    // The shared x range [x0, x1] as this run's steps (its own tokens or times), read at `pts` resolution.
    async readWindow(it, range, pts, signal) {
      const s0 = it.run.toStep(range[0]), s1 = it.run.toStep(range[1]);
      if (!Number.isFinite(s0) || !Number.isFinite(s1)) return null;
      const a = Math.max(0, Math.floor(Math.min(s0, s1))), b = Math.max(0, Math.ceil(Math.max(s0, s1)));
      const w = await it.run.store.window(this.id, a, b, pts, signal);
      return w && {...w, from: a, to: b};
    }

    renderTable() { // one column per run; a zoomed view keeps each run's steps inside the shared x range
      const det = this.els.table;
      if (!det.open) return;
      this.tableAt = performance.now();
      const range = this.ctx.view.range;
      const cols = this.items.map((it) => range && this.drawable(it)
        ? Obs.tableColumn(this.data(it), it.name, it.run.toStep(range[0]), it.run.toStep(range[1]))
        : Obs.tableColumn(this.data(it), it.name));
      Obs.renderTable(det.querySelector(".table-wrap"), `${this.title}, ${range ? "the zoomed range" : "whole runs"}`,
                      cols, 1000);
    }

    note() {
      super.note();
      const extra = [];
      const lacking = this.items.filter((it) => it.series && it.series.waiting).map((it) => it.name);
      if (lacking.length && lacking.length < this.items.length) extra.push("not in " + lacking.join(", "));
      if (this.offAxis.length) extra.push(`no ${AXIS_WORD[this.ctx.view.x]}: ${this.offAxis.join(", ")}`);
      if (this.ctx.view.logx && this.ctx.view.x === "step") extra.push("step 0 is off the log axis");
      if (!extra.length) return;
      const el = this.els.note;
      const text = [el.textContent, ...extra].filter(Boolean).join(" · ");
      if (el.textContent !== text) el.textContent = text;
    }
  }

  Obs.CompareChart = CompareChart;
})(window.Obs);
