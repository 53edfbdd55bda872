// A minimal live chart (an embed, a report's chart, compare and forecast blocks): a line per run of one series
// over a step range, drawn by the one line renderer (plot.js over uPlot: axes with ticks, a legend for several runs,
// hover values). It reads the series API once, then follows each run on the dashboard's live path: one Obs.Store
// and one Obs.LiveSocket per run (series.js, live.js: resume/backfill on the hub, or nchan's channel), shared by
// every chart of the page. Page data (#page-data): {charts: [{runs, series, start, end}], live_push?}.
// A chart element (.minichart[data-chart=i]) carries data-last-step / data-points for whoever watches it advance.
"use strict";

(function (Obs) {
  const POINTS = 600; // history resolution per series (an embed is a few hundred pixels wide)

  // A run's Store that reads each series over the union of the steps its charts show.
  class RangedStore extends Obs.Store {
    constructor(apiBase, onReady) { super(apiBase, onReady); this.ranges = new Map(); }
    widen(name, start, end) { // (no end: to the run's end)
      start = start ?? 0; end = end ?? null;
      const r = this.ranges.get(name) || {start, end};
      this.ranges.set(name, {start: Math.min(r.start, start), end: r.end === null || end === null ? null
        : Math.max(r.end, end)});
    }
    url(name, query) {
      const r = this.ranges.get(name);
      if (r) query += "&start=" + r.start + (r.end != null ? "&end=" + r.end : "");
      return super.url(name, query);
    }
  }

  class MiniChart {
    constructor(node, spec, stores) {
      this.node = node; this.spec = spec; this.queued = false;
      this.series = spec.runs.map((run) => stores(run).want(spec.series, this, {points: POINTS}));
    }
    reset() { this.schedule(); }
    added() { this.schedule(); }
    schedule() {
      if (this.queued) return;
      this.queued = true;
      requestAnimationFrame(() => { this.queued = false; this.draw(); });
    }
    // The points of run i inside the chart's range.
    visible(s) {
      const a = Obs.lowerBound(s.steps, this.spec.start ?? -Infinity);
      const b = Obs.lowerBound(s.steps, (this.spec.end ?? Infinity) + 1);
      return {x: s.steps.slice(a, b), y: s.values.slice(a, b)};
    }
    draw() { // through plot.js, as every line chart
      const lines = this.series.map((s) => this.visible(s));
      const traces = lines.map((l, i) => ({x: l.x, y: l.y, mode: "lines", name: this.spec.runs[i],
                                           line: {color: Obs.lineColor(i), width: 1.5}}));
      const xaxis = {autorange: true};
      if (this.spec.start != null && this.spec.end != null && this.spec.end > this.spec.start) {
        Object.assign(xaxis, {autorange: false, range: [this.spec.start, this.spec.end]});
      }
      const multi = this.spec.runs.length > 1;
      Obs.drawFigure(this.node, traces, {margin: {l: 52, r: 10, t: multi ? 22 : 10, b: 22}, showlegend: multi,
                                         xaxis, yaxis: {}, hovermode: "x", dragmode: false});
      if (!this.node.hasAttribute("role")) this.node.setAttribute("role", "img");
      let last = -1, points = 0;
      lines.forEach((l) => { if (l.x.length) { last = Math.max(last, l.x[l.x.length - 1]); points += l.x.length; } });
      this.node.dataset.lastStep = String(last);
      this.node.dataset.points = String(points);
    }
  }

  function start() {
    const dataEl = document.getElementById("page-data");
    const page = dataEl ? JSON.parse(dataEl.textContent) : {};
    const specs = page.charts || [];
    const runs = new Map(); // run id -> {store, live}
    const statusEls = document.querySelectorAll(".minichart-status");
    const status = (t) => statusEls.forEach((e) => { e.textContent = t; });
    const stores = (run) => {
      if (!runs.has(run)) {
        const entry = {lastEvent: (page.last_events || {})[run] || 0};
        entry.store = new RangedStore("/api/runs/" + encodeURIComponent(run), (names) => entry.live.ready(names));
        entry.live = new Obs.LiveSocket(run, entry.store, () => entry.lastEvent, (msg) => handle(entry, msg), status,
                                        page.live_push);
        runs.set(run, entry);
      }
      return runs.get(run).store;
    };
    specs.forEach((spec) => spec.runs.forEach((run) => stores(run).widen(spec.series, spec.start, spec.end)));
    const charts = [];
    document.querySelectorAll(".minichart[data-chart]").forEach((node) => {
      const spec = specs[Number(node.dataset.chart)];
      if (spec) { const c = new MiniChart(node, spec, stores); charts.push(c); c.draw(); }
    });
    window.addEventListener("resize", () => charts.forEach((c) => c.schedule()));
    document.addEventListener("obs-theme", () => charts.forEach((c) => c.schedule())); // (theme.js: the palette)
    runs.forEach((entry) => entry.live.connect());
  }

  function handle(entry, msg) {
    if (msg.type !== "update" && msg.type !== "backfill") return; // feature frames: not this chart's business
    const store = entry.store;
    for (const ev of msg.events || []) entry.lastEvent = Math.max(entry.lastEvent, ev.id || 0);
    for (const rw of msg.rewinds || []) store.rewind(rw.to_step);
    for (const [name, s] of Object.entries(msg.series || {})) store.apply(name, s);
    for (const name of msg.truncated || []) store.reload(name);
  }

  start();
})(window.Obs);
