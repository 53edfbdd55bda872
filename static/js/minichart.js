// A minimal live chart (an embed, a report's chart, compare and forecast blocks): an SVG line per run of one series
// over a step range. It reads the series API once, then follows each run on the dashboard's live path: one
// Obs.Store and one Obs.LiveSocket per run (series.js, live.js: resume/backfill on the hub, or nchan's channel),
// shared by every chart of the page. Page data (#page-data): {charts: [{runs, series, start, end}], live_push?}.
// A chart element (.minichart[data-chart=i]) carries data-last-step / data-points for whoever watches it advance.
"use strict";

window.Obs = window.Obs || {};

(function (Obs) {
  const POINTS = 600; // history resolution per series (an embed is a few hundred pixels wide)
  const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"];
  const NS = "http://www.w3.org/2000/svg";

  // A run's Store that reads each series over the union of the steps its charts show.
  class RangedStore extends Obs.Store {
    constructor(apiBase, onReady) { super(apiBase, onReady); this.ranges = new Map(); }
    widen(name, start, end) {
      const r = this.ranges.get(name);
      const s = start == null ? 0 : start;
      this.ranges.set(name, r ? {start: Math.min(r.start, s), end: r.end == null || end == null ? null : Math.max(r.end, end)}
                               : {start: s, end: end == null ? null : end});
    }
    url(name, query) {
      const r = this.ranges.get(name);
      let q = query;
      if (r) { q += "&start=" + r.start; if (r.end != null) q += "&end=" + r.end; }
      return super.url(name, q);
    }
  }

  function el(tag, attrs, text) {
    const e = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (text != null) e.textContent = text;
    return e;
  }

  const fmt = (v) => (Math.abs(v) >= 1e4 || (Math.abs(v) < 1e-3 && v !== 0) ? v.toExponential(2) : String(+v.toPrecision(4)));

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
      const lo = this.spec.start == null ? -Infinity : this.spec.start, hi = this.spec.end == null ? Infinity : this.spec.end;
      const a = Obs.lowerBound(s.steps, lo);
      const b = Obs.lowerBound(s.steps, hi + 1);
      return {x: s.steps.slice(a, b), y: s.values.slice(a, b)};
    }
    draw() {
      const w = this.node.clientWidth || 600, h = this.node.clientHeight || 240, pad = {l: 52, r: 10, t: 10, b: 22};
      const lines = this.series.map((s) => this.visible(s));
      const xs = lines.flatMap((l) => [l.x[0], l.x[l.x.length - 1]]).filter((v) => v !== undefined);
      const ys = lines.flatMap((l) => l.y);
      let x0 = this.spec.start != null ? this.spec.start : Math.min(...xs);
      let x1 = this.spec.end != null ? this.spec.end : Math.max(...xs);
      let y0 = Math.min(...ys), y1 = Math.max(...ys);
      if (!Number.isFinite(x0) || !Number.isFinite(x1)) { x0 = 0; x1 = 1; }
      if (x1 <= x0) x1 = x0 + 1;
      if (!Number.isFinite(y0)) { y0 = 0; y1 = 1; }
      if (y1 <= y0) { y0 -= 0.5; y1 += 0.5; }
      const sx = (x) => pad.l + ((x - x0) / (x1 - x0)) * (w - pad.l - pad.r);
      const sy = (y) => h - pad.b - ((y - y0) / (y1 - y0)) * (h - pad.t - pad.b);
      const svg = el("svg", {width: w, height: h, viewBox: `0 0 ${w} ${h}`, role: "img",
                             "aria-label": this.node.getAttribute("aria-label") || this.spec.series});
      svg.appendChild(el("rect", {x: pad.l, y: pad.t, width: w - pad.l - pad.r, height: h - pad.t - pad.b, class: "mc-frame"}));
      svg.appendChild(el("text", {x: pad.l - 4, y: pad.t + 10, "text-anchor": "end", class: "mc-tick"}, fmt(y1)));
      svg.appendChild(el("text", {x: pad.l - 4, y: h - pad.b, "text-anchor": "end", class: "mc-tick"}, fmt(y0)));
      svg.appendChild(el("text", {x: pad.l, y: h - 6, class: "mc-tick"}, "step " + Math.round(x0)));
      svg.appendChild(el("text", {x: w - pad.r, y: h - 6, "text-anchor": "end", class: "mc-tick"}, String(Math.round(x1))));
      let last = -1, points = 0;
      lines.forEach((l, i) => {
        if (!l.x.length) return;
        let d = "";
        for (let j = 0; j < l.x.length; j++) d += (j ? "L" : "M") + sx(l.x[j]).toFixed(1) + " " + sy(l.y[j]).toFixed(1);
        svg.appendChild(el("path", {d, fill: "none", stroke: COLORS[i % COLORS.length], "stroke-width": 1.5,
                                    "data-run": this.spec.runs[i]}));
        last = Math.max(last, l.x[l.x.length - 1]); points += l.x.length;
      });
      if (this.spec.runs.length > 1) {
        this.spec.runs.forEach((run, i) => svg.appendChild(el("text", {x: w - pad.r - 6, y: pad.t + 14 + 14 * i,
          "text-anchor": "end", fill: COLORS[i % COLORS.length], class: "mc-legend"}, run)));
      }
      this.node.replaceChildren(svg);
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
        entry.live = new Obs.LiveSocket(run, entry.store, () => entry.lastEvent, (msg) => handle(entry, msg), status);
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

  Obs.MiniChart = MiniChart;
  start();
})(window.Obs);
