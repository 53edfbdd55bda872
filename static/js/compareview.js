// What the compare page shows and how each run maps onto the shared x axis.
//   Obs.CompareView: the dashboard's view state (view.js: charts, x, log y per chart, smoothing, range) plus the
//     runs compared and log x, all in the URL alone (no localStorage: a shared link must show exactly what its
//     sender saw). The range is in the x axis's own units (steps, tokens or seconds since each run's start).
//   Obs.RunLine: one run of the comparison: its Obs.Store of series, its Obs.XAxis (steps -> tokens from its own
//     token count, or -> wall time from its own (step, time) anchors), its colour and its legend label.
//   Obs.durationTicks: tick values and "1 h 30 min" labels for a seconds axis.
"use strict";

window.Obs = window.Obs || {};

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
    return {tickmode: "array", tickvals: vals,
      ticktext: vals.map((v) => (v < 0 ? "−" : "") + Obs.duration(Math.abs(v)))};
  };

  Obs.CompareView = CompareView;
  Obs.RunLine = RunLine;
})(window.Obs);
