// The compare page's model and charts.
//   Obs.CompareView: the dashboard's view state (view.js: charts, x, log y per chart, smoothing, range) plus the
//     runs compared and log x, all in the URL alone (no localStorage: a shared link must show exactly what its
//     sender saw). The range is in the x axis's own units (steps, tokens or seconds since each run's start).
//   Obs.RunLine: one run of the comparison: its Obs.Store of series, its Obs.XAxis (steps -> tokens from its own
//     token count, or -> wall time from its own (step, time) anchors), its colour and its legend label.
//   Obs.durationTicks: tick values and "1 h 30 min" labels for a seconds axis.
//   Obs.CompareChart: one metric, one line per run (Obs.RunLine), each run's steps mapped onto the shared x axis
//     by its own Obs.XAxis. It is an Obs.LineChart (charts.js, zoom.js): the same card, tools, y fitting, data
//     table, debiased-EMA smoothing with the raw line faint behind, and the same real zoom — a zoom reads each
//     run's window at the plot's pixel width (min/max buckets), mapped from the shared x range to its own steps.
//     Items: {name: the run's legend label, metric: the chart's, run, store: the run's, series, zoom}.
"use strict";

(function (Obs) {
  const splitRuns = (values) => [...new Set(values.flatMap((v) => v.split(",")).map((s) => s.trim()).filter(Boolean))];

  class CompareView extends Obs.View {
    constructor(defaults) {
      super(defaults, null);
      const q = new URLSearchParams(location.search);
      this.runs = splitRuns(q.getAll("runs")); // "a,b,c" or, from the run list's form, runs=a&runs=b
      this.logx = q.get("logx") === "1";
    }

    toggleLogX() { this.set({logx: !this.logx}); }

    url() {
      const q = this.query();
      q.delete("runs"); q.delete("logx");
      if (this.logx) q.set("logx", "1");
      const rest = q.toString(); // run ids need no escaping (contract.RUN_ID_RE): the list stays readable
      const runs = this.runs.length ? "runs=" + this.runs.map(encodeURIComponent).join(",") : "";
      return location.pathname + "?" + [runs, rest].filter(Boolean).join("&") + location.hash;
    }
  }

  class RunLine {
    // info: one run of /api/compare/; index: its colour; onAxis(): its token count came in (redraw in tokens mode).
    constructor(info, tokensMetric, onAxis) {
      this.id = info.id;
      this.store = new Obs.Store("/api/runs/" + encodeURIComponent(info.id), () => {}); // history only, no socket
      this.xaxis = new Obs.XAxis(this.store, {tokens_metric: tokensMetric, time_anchors: info.time_anchors}, onAxis);
      this.index = 0; this.label = info.name || info.id;
      this.update(info);
    }

    update(info) {
      this.info = info;
      if (!this.store.exists) this.store.exists = new Set(); // a series it lacks is never asked for
      info.metrics.forEach((m) => { this.store.meta.set(m.name, m); this.store.discover(m.name); });
      const first = info.time_anchors.length ? info.time_anchors[0][1] * 1000 : null;
      const started = info.started ? Date.parse(info.started) : null;
      this.t0 = started !== null && first !== null ? Math.min(started, first) : (started ?? first);
    }

    supports(mode) { return mode === "step" || !!this.xaxis.available()[mode]; }

    // The page's x mode: tokens load this run's token count; a mode the run cannot show leaves it on steps
    // (and its lines off those charts: see CompareChart.traces).
    setMode(mode) { this.xaxis.setMode(this.supports(mode) ? mode : "step"); }

    toX(steps) {
      const x = this.xaxis.toX(steps);
      return this.xaxis.mode === "time" ? x.map((ms) => (ms - this.t0) / 1000) : x;
    }

    toStep(x) { return this.xaxis.toStep(this.xaxis.mode === "time" ? x * 1000 + this.t0 : x); }
  }

  const NICE_S = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400,
                  172800, 432000, 864000, 1728000, 4320000];

  // About `n` ticks over [lo, hi] seconds at a round duration apart, labelled as durations.
  Obs.durationTicks = (lo, hi, n = 5) => {
    if (!(hi > lo)) return null;
    const step = NICE_S.find((s) => (hi - lo) / s <= n) || NICE_S[NICE_S.length - 1];
    const vals = [];
    for (let v = Math.ceil(lo / step) * step; v <= hi && vals.length < 50; v += step) vals.push(v);
    return {tickvals: vals, ticktext: vals.map((v) => (v < 0 ? "−" : "") + Obs.duration(Math.abs(v)))};
  };
  // The same on a log axis over [lo, hi] (lo > 0): round durations at least a ratio apart (1 s, 5 s, 30 s, 5 min…)
  const logDurationTicks = (lo, hi, n) => {
    const vals = [], ratio = Math.max(3, (hi / lo) ** (1 / n));
    for (const s of NICE_S) if (s >= lo && s <= hi && !(s < vals[vals.length - 1] * ratio)) vals.push(s);
    return vals.length < 2 ? Obs.durationTicks(lo, hi, n) : {tickvals: vals, ticktext: vals.map(Obs.duration)};
  };

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
      const lay = super.layout(traces), view = this.ctx.view, xa = lay.xaxis, n = this.width < 500 ? 3 : 6;
      if (view.x === "time") { // seconds since each run's start, as durations (a log axis: from its first x > 0)
        const [lo, hi] = view.range || Obs.xExtent(traces);
        const first = Math.min(...traces.map((t) => [].find.call(t.x || [], (v) => v > 0) || Infinity));
        Object.assign(xa, (view.logx ? logDurationTicks(Math.max(lo, first), hi, n) : Obs.durationTicks(lo, hi, n))
          || {});
      }
      if (view.logx) {
        xa.type = "log";
        if (xa.range) xa.range = xa.range.map((v) => Math.log10(Math.max(v, 0))); // (from 0: from the first x > 0)
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

  Object.assign(Obs, {CompareView, RunLine, CompareChart});
})(window.Obs);
