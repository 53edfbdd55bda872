// MoE panels over Obs.Store series.
//  RouterPanel: for one layer (a select), a heatmap of tokens per expert (rows: experts, columns: steps) built
//    from the routing_hist/<e> series, with that layer's max/mean load and capacity-overflow rate as lines
//    below on the same step axis. Columns are step bins of width W; a cell is the largest load seen in its bin
//    (a hot expert is never averaged away). History is ~300 points per expert; live points fill bins as they
//    arrive; past MAX_COLS bins the panel re-bins at twice the width, so a 16-expert layer stays a few thousand
//    cells however long the run.
//  DataPanel: the run's data manifest (domains, sources, sizes, stages and their mixture weights) with the
//    current stage and the live mixture weights (mixture/stage, mixture/weight/<domain>).
"use strict";

window.Obs = window.Obs || {};

(function (Obs) {
  const EXPERT_POINTS = 300; // history per expert series
  const LINE_POINTS = 1000; // history of the max/mean-load and overflow lines
  const EXPERT_CAP = 20000; // points held per expert series before it reloads its history
  const MAX_COLS = 400; // heatmap columns before re-binning
  const MIN_REDRAW_MS = 200; // the heatmap redraws at most 5 times a second
  const RED = "#c62828";

  const fmt = (v) => (v === null || v === undefined ? "–" : Math.abs(v) >= 1e4 || (v !== 0 && Math.abs(v) < 1e-3)
    ? v.toExponential(2) : (+v.toPrecision(4)).toString());

  // ============================================================================================== router
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
      this.select.addEventListener("change", () => this.setLayer(+this.select.value));
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
        this.select.replaceChildren(...opts.map((l) => {
          const o = document.createElement("option");
          o.value = l; o.textContent = "layer " + l;
          return o;
        }));
      }
      if (set.has(expert)) return;
      set.add(expert);
      this.section.hidden = false;
      if (this.layer === null) this.setLayer(Math.min(...this.layers.keys()));
      else if (layer === this.layer) this.setLayer(layer); // a new expert row
      if (this.layer !== null) this.select.value = this.layer;
    }

    setLayer(layer) {
      const view = this;
      const old = [...this.experts, ...this.lines].map((s) => s.name);
      this.layer = layer;
      this.rows = [...this.layers.get(layer)].sort((a, b) => a - b);
      const store = this.ctx.store;
      this.experts = this.rows.map((e) => store.want(this.name(layer, "routing_hist") + "/" + e, view,
                                                     {points: EXPERT_POINTS, cap: EXPERT_CAP}));
      this.lines = ["max_mean_load", "capacity_overflow_rate"].map(
        (w) => store.want(this.name(layer, w), view, {points: LINE_POINTS}));
      const keep = new Set([...this.experts, ...this.lines].map((s) => s.name));
      for (const name of old) if (!keep.has(name)) store.release(name, view);
      this.select.value = layer;
      this.plot.dataset.layer = layer;
      this.reset();
    }

    reset() { this.full = true; this.dirty = true; this.ctx.schedule(); }

    added(s, add) {
      this.dirty = true;
      const row = this.experts.indexOf(s);
      if (!this.full && row >= 0) {
        for (let i = 0; i < add.x.length; i++) this.put(row, add.x[i], add.y[i]);
        for (let i = 0; i < add.nfx.length; i++) this.nf.push([add.nfx[i], this.rows[row], add.nfk[i]]);
        if (this.cols.size > MAX_COLS) { this.full = true; this.shrink = true; }
      }
      this.ctx.schedule();
    }

    put(row, step, v) {
      const k = Math.floor(step / this.W);
      let col = this.cols.get(k);
      if (!col) { col = new Array(this.rows.length).fill(null); this.cols.set(k, col); }
      if (col[row] === null || v > col[row]) col[row] = v;
    }

    // Bin every held point again: after a history load, a rewind, a new expert, or too many columns.
    rebuild() {
      let lo = Infinity, hi = -Infinity, w0 = 1;
      for (const s of this.experts) {
        if (s.steps.length) { lo = Math.min(lo, s.steps[0]); hi = Math.max(hi, s.steps[s.steps.length - 1]); }
        if (s.nfSteps.length) { lo = Math.min(lo, s.nfSteps[0]); hi = Math.max(hi, s.nfSteps[s.nfSteps.length - 1]); }
        w0 = Math.max(w0, s.bucketSteps || 1);
      }
      const span = hi >= lo ? hi - lo + 1 : 1;
      const target = this.shrink ? MAX_COLS / 2 : MAX_COLS; // leave room for live columns after a re-bin
      this.W = Math.max(w0, Math.ceil(span / target));
      this.shrink = false;
      this.cols = new Map();
      this.nf = [];
      this.experts.forEach((s, row) => {
        for (let i = 0; i < s.steps.length; i++) this.put(row, s.steps[i], s.values[i]);
        for (let i = 0; i < s.nfSteps.length; i++) this.nf.push([s.nfSteps[i], this.rows[row], s.nfKinds[i]]);
      });
      this.full = false;
    }

    redraw() {
      if (!this.dirty || this.layer === null) return;
      if ([...this.experts, ...this.lines].some((s) => s.loading)) { // one draw once the layer's history is in
        this.note.textContent = "loading layer " + this.layer + "…";
        return; // the last load's reset() schedules the redraw
      }
      const wait = this.lastDraw + MIN_REDRAW_MS - performance.now();
      if (wait > 0) {
        if (!this.timer) this.timer = setTimeout(() => { this.timer = null; this.ctx.schedule(); }, wait);
        return;
      }
      this.dirty = false;
      this.lastDraw = performance.now();
      if (this.full) this.rebuild();
      const W = this.W;
      const keys = [...this.cols.keys()].sort((a, b) => a - b);
      const x = keys.map((k) => k * W + (W - 1) / 2);
      const z = this.rows.map((_, r) => keys.map((k) => this.cols.get(k)[r]));
      const binText = W > 1 ? "steps %{x} ± " + (W / 2) + " (max in bin)" : "step %{x}";
      const [mml, ovf] = this.lines;
      const lineMarks = (s, axisY) => ({x: s.nfSteps.slice(), y: s.nfSteps.map(() => 1), text: s.nfKinds.slice(),
        type: "scatter", mode: "markers", yaxis: axisY, showlegend: false, marker: {color: RED, symbol: "x", size: 8},
        hovertemplate: s.name.split("/").pop() + " step %{x}: %{text}<extra></extra>"});
      const traces = [
        {type: "heatmap", x, y: this.rows.slice(), z, colorscale: "Viridis", zmin: 0, hoverongaps: false,
         colorbar: {title: {text: "tokens", side: "right"}, len: 0.62, y: 1, yanchor: "top", thickness: 10, x: 1.01},
         hovertemplate: "expert %{y}<br>" + binText + "<br>%{z} tokens<extra></extra>", name: "tokens"},
        {type: "scatter", mode: "markers", x: this.nf.map((p) => p[0]), y: this.nf.map((p) => p[1]),
         text: this.nf.map((p) => p[2]), marker: {color: RED, symbol: "x", size: 9}, showlegend: false,
         name: "non-finite", hovertemplate: "expert %{y} step %{x}: %{text}<extra></extra>"},
        {type: "scatter", mode: "lines", x: mml.steps.slice(), y: mml.values.slice(), yaxis: "y2", name: "max/mean load",
         line: {color: "#e07b00", width: 1.3}, hovertemplate: "max/mean load<br>step %{x}<br>%{y}<extra></extra>"},
        {type: "scatter", mode: "lines", x: ovf.steps.slice(), y: ovf.values.slice(), yaxis: "y3",
         name: "capacity overflow", line: {color: "#c2185b", width: 1.1, dash: "dot"},
         hovertemplate: "capacity overflow<br>step %{x}<br>%{y:.2%}<extra></extra>"},
        lineMarks(mml, "y4"), lineMarks(ovf, "y4"),
      ];
      const layout = {
        margin: {l: 55, r: 60, t: 8, b: 30}, hovermode: "closest", uirevision: "layer-" + this.layer,
        showlegend: true, legend: {orientation: "h", x: 0, y: 0.31, yanchor: "bottom", font: {size: 10}},
        xaxis: {title: {text: "step"}, automargin: true, anchor: "y2"},
        yaxis: {domain: [0.4, 1], title: {text: "expert"}, dtick: this.rows.length <= 32 ? 1 : undefined,
                automargin: true, tickfont: {size: 9}},
        yaxis2: {domain: [0, 0.3], title: {text: "max/mean", font: {size: 10}}, automargin: true, rangemode: "tozero"},
        yaxis3: {overlaying: "y2", side: "right", tickformat: ".2~%", rangemode: "tozero", showgrid: false,
                 title: {text: "overflow", font: {size: 10}}, automargin: true},
        yaxis4: {overlaying: "y2", range: [0, 1.05], visible: false, fixedrange: true},
      };
      Plotly.react(this.plot, traces, layout, {responsive: true, displaylogo: false});
      const nf = this.experts.reduce((a, s) => a + s.nfTotal, 0) + mml.nfTotal + ovf.nfTotal;
      const lm = mml.lastValue(), lo = ovf.lastValue();
      const parts = [`${this.rows.length} experts`, W > 1 ? `${keys.length} bins of ${W} steps` : `${keys.length} steps`];
      if (lm) parts.push(`max/mean ${typeof lm[1] === "number" ? fmt(lm[1]) : lm[1]} @ ${lm[0]}`);
      if (lo) parts.push(`overflow ${typeof lo[1] === "number" ? (100 * lo[1]).toFixed(2) + "%" : lo[1]}`);
      this.note.textContent = parts.join(" · ");
      const bad = document.getElementById("router-nonfinite");
      bad.textContent = nf ? nf + " non-finite" : "";
    }
  }

  // ============================================================================================== data
  const bytes = (n) => n === undefined || n === null ? "–" : n >= 1e9 ? (n / 1e9).toFixed(2) + " GB"
    : n >= 1e6 ? (n / 1e6).toFixed(2) + " MB" : n >= 1e3 ? (n / 1e3).toFixed(1) + " kB" : n + " B";
  const count = (n) => n === undefined || n === null ? "–" : n >= 1e9 ? (n / 1e9).toFixed(2) + "B"
    : n >= 1e6 ? (n / 1e6).toFixed(2) + "M" : n >= 1e3 ? (n / 1e3).toFixed(1) + "k" : String(n);

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v; else if (k === "text") e.textContent = v;
      else if (k.startsWith("data-")) e.setAttribute(k, v); else e[k] = v;
    }
    for (const c of children) if (c !== null && c !== undefined) e.append(c);
    return e;
  }

  function weightCell(w, cls) {
    const td = el("td", {class: "num weight " + (cls || "")});
    if (typeof w !== "number" || !isFinite(w)) { td.textContent = w === undefined || w === null ? "–" : String(w); return td; }
    const pct = Math.max(0, Math.min(1, w)) * 100;
    td.append(el("span", {class: "bar", style: ""}), el("span", {class: "pct", text: (w * 100).toFixed(1) + "%"}));
    td.firstChild.style.width = pct.toFixed(1) + "%";
    return td;
  }

  class DataPanel {
    constructor(ctx, names) {
      this.ctx = ctx;
      this.stageName = names.stage;
      this.weightPrefix = names.weight_prefix;
      this.manifest = null;
      this.domains = []; // names, manifest order then any only seen in mixture/weight/*
      this.stage = null; // Series
      this.weights = new Map(); // domain -> Series
      this.dirty = false;
      this.section = document.getElementById("data-panel");
    }

    hasManifest() { return !!(this.manifest && Object.keys(this.manifest).length); }

    setManifest(m) {
      if (!m || !Object.keys(m).length) return;
      this.manifest = m;
      for (const d of m.domains || []) this.addDomain(d.name);
      this.watchStage();
      this.touch();
    }

    // A series name the run has: mixture/stage or mixture/weight/<domain>.
    discover(name) {
      if (name === this.stageName) { this.watchStage(); this.touch(); }
      else if (name.startsWith(this.weightPrefix) && !name.slice(this.weightPrefix.length).includes("/")) {
        this.addDomain(name.slice(this.weightPrefix.length));
        this.touch();
      }
    }

    watchStage() { if (!this.stage) this.stage = this.ctx.store.want(this.stageName, this, {tail: true}); }

    addDomain(d) {
      if (!this.domains.includes(d)) this.domains.push(d);
      if (!this.weights.has(d)) this.weights.set(d, this.ctx.store.want(this.weightPrefix + d, this, {tail: true}));
    }

    touch() { this.dirty = true; this.ctx.schedule(); }
    reset() { this.touch(); }
    added() { this.touch(); }

    currentStage() {
      const lv = this.stage && this.stage.lastValue();
      return lv && typeof lv[1] === "number" ? Math.round(lv[1]) : null;
    }

    redraw() {
      if (!this.dirty) return;
      this.dirty = false;
      if (!this.hasManifest() && !this.domains.length) return;
      this.section.hidden = false;
      const m = this.manifest || {};
      const stages = m.stages || [];
      const cur = this.currentStage();
      const byName = new Map((m.domains || []).map((d) => [d.name, d]));

      const stageEl = document.getElementById("data-stage");
      stageEl.dataset.stage = cur === null ? "" : cur;
      if (cur === null) stageEl.textContent = stages.length ? "not started" : "–";
      else stageEl.textContent = (stages[cur] ? stages[cur].name : "stage " + cur) +
        (stages.length ? ` (${cur + 1} of ${stages.length})` : "");

      const facts = [];
      if (m.tokenizer) facts.push(["tokenizer", m.tokenizer.name + (m.tokenizer.vocab_size ? ` (vocab ${m.tokenizer.vocab_size})` : "")]);
      if (m.seq_len) facts.push(["sequence", m.seq_len + " tokens"]);
      if (m.batch_size) facts.push(["batch", String(m.batch_size)]);
      if (m.token_budget) facts.push(["token budget", count(m.token_budget)]);
      if (m.seed !== undefined) facts.push(["seed", String(m.seed)]);
      if (typeof m.load_seconds === "number") facts.push(["loaded in", m.load_seconds.toFixed(2) + " s"]);
      document.getElementById("data-facts").replaceChildren(
        ...facts.map(([k, v]) => el("span", {class: "stat"}, k + " ", el("b", {text: v}))));

      const head = el("tr", {}, el("th", {text: "domain"}), el("th", {text: "sources"}),
                      el("th", {class: "num", text: "documents"}), el("th", {class: "num", text: "size"}),
                      el("th", {class: "num", text: "tokens"}));
      stages.forEach((st, i) => {
        const th = el("th", {class: "num stage" + (i === cur ? " current" : ""),
                             title: `${(st.fraction * 100).toFixed(0)}% of the budget: tokens ${count(st.start_tokens)}–${count(st.end_tokens)}`},
                      st.name, el("br"), el("span", {class: "muted", text: (st.fraction * 100).toFixed(0) + "% of tokens"}));
        th.dataset.stageIndex = i;
        head.append(th);
      });
      head.append(el("th", {class: "num live", text: "weight now"}));
      const rows = this.domains.map((name) => {
        const d = byName.get(name) || {name};
        const src = el("ul", {class: "sources"}, ...(d.sources || []).map((s) =>
          el("li", {text: `${s.kind}: ${s.pattern}` + (s.files !== undefined ? ` · ${s.files} files` : "") +
                          (s.bytes !== undefined ? ` · ${bytes(s.bytes)}` : "")})));
        const tr = el("tr", {"data-domain": name},
          el("td", {}, el("b", {text: name}), d.builtin ? el("span", {class: "muted", text: " built-in"}) : null),
          el("td", {}, src),
          el("td", {class: "num", text: count(d.documents)}),
          el("td", {class: "num", text: bytes(d.bytes)}),
          el("td", {class: "num", text: count(d.tokens), title: d.train_tokens !== undefined ?
                    `train ${d.train_tokens}, eval ${d.eval_tokens}` : ""}));
        stages.forEach((st, i) => tr.append(weightCell((st.weights || {})[name], i === cur ? "current" : "")));
        const lv = this.weights.get(name) && this.weights.get(name).lastValue();
        tr.append(weightCell(lv ? lv[1] : null, "live"));
        return tr;
      });
      document.getElementById("data-domains").replaceChildren(el("thead", {}, head), el("tbody", {}, ...rows));
    }
  }

  Obs.RouterPanel = RouterPanel;
  Obs.DataPanel = DataPanel;
})(window.Obs);
