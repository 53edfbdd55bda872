// A compare chart: one metric, one line per run (Obs.RunLine), each run's steps mapped onto the shared x axis by
// its own Obs.XAxis. It is an Obs.LineChart (charts.js, zoom.js): the same card, tools, y fitting, data table,
// debiased-EMA smoothing with the raw line faint behind, and the same real zoom — a zoom reads each run's window
// at the plot's pixel width (min/max buckets), mapped from the shared x range to that run's own steps.
// Items: {name: the run's legend label, metric: the chart's, run, store: the run's, series, zoom}; the traces
// are charts.js's, one line of each kind per run that can be drawn (shown()).
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
      for (const it of this.items) if (!runs.includes(it.run)) it.store.release(this.id, this);
      this.items = runs.map((run) => this.items.find((it) => it.run === run) ||
        {run, metric: this.id, store: run.store, zoom: null, secondary: false,
         series: run.store.want(this.id, this, {points: this.resolution()})});
      this.items.forEach((it) => { it.index = it.run.index; it.name = it.run.label; });
      if (this.ctx.view.range) this.setRange(); // new lines read the zoomed window too
      this.full = true; this.dirty = true; this.ctx.schedule();
    }

    label(name) { return name; } // items are named by their run

    labelRow() { return false; } // (a comparison has no marks: no rewinds, no overlays)

    drawable(it) { return it.run.supports(this.ctx.view.x); }

    shown() { // the runs that have the series, and the x axis (the others are named in the note)
      const has = this.items.filter((it) => it.series && !it.series.waiting && !it.series.missing);
      this.offAxis = has.filter((it) => !this.drawable(it)).map((it) => it.name);
      return has.filter((it) => this.drawable(it));
    }
    xOf(it, steps) { return it.run.toX(steps); }
    stepOf(it, x) { return it.run.toStep(x); }
    names(label, smoothing) { return smoothing ? [label + " (raw)", label] : [label, label]; } // (the legend: runs)

    layout(traces) {
      const lay = super.layout(traces), view = this.ctx.view, xa = lay.xaxis;
      if (view.logx) {
        xa.type = "log";
        if (xa.range) xa.range = xa.range.map((v) => Math.log10(Math.max(v, 1e-9)));
      } else if (view.x === "time") { // seconds since each run's start, labelled as durations
        const [lo, hi] = view.range || Obs.xExtent(traces);
        Object.assign(xa, Obs.durationTicks(lo, hi, this.width < 500 ? 3 : 6) || {});
      }
      return lay;
    }

    where(range) { return range ? "the zoomed range" : "whole runs"; }

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
