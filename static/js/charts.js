// Line charts over Obs.Store series: one trace per series (the first is the chart's own metric), extra traces
// joining as the run reveals them (per-domain losses), an optional right-hand axis (MFU next to tokens/s).
// Zoom is real (zoom.js): a zoomed chart draws its window's finer points between the coarse history on either
// side, live points still join, and the y axis fits the visible window.
// Trace order (tests and feature modules rely on it): lines 0..n-1, non-finite marks n..2n-1, impossible-value
// marks 2n..3n-1, smoothed lines 3n..4n-1 (only while smoothing is on; the raw lines then stay faint behind), then
// the traces of feature modules (Obs.setTraces: forecast.js's band).
// Non-finite points are red ✕ at the top of the chart; values no hardware can produce (page bounds: MFU above
// 100%) are amber ▲ there, never part of the line; both are counted in the chart's note, nothing is dropped.
// Drawing is only for what is seen: a chart off screen draws nothing until it is scrolled into view (then all it
// missed at once). Live points that fall inside a live chart's axes (drawn with some headroom) are appended to its
// drawn lines without a Plotly redraw; hover is computed only once a pointer is over the chart; a line longer than
// four points a pixel is drawn at its min and max per pixel (spikes kept, as the server's pyramid does).
"use strict";

window.Obs = window.Obs || {};
// Why charts redraw (bench/liveview.py reports it): full Plotly redraws, marks-only redraws, live points appended in
// place, and what kept live points from being appended.
window.Obs.redrawCounts = {full: 0, remark: 0, append: 0, miss: {}};

(function (Obs) {
  const PALETTE = ["#1f5fbf", "#d9730d", "#2e7d32", "#8e24aa", "#00838f", "#6d4c41", "#c2185b", "#546e7a",
                   "#9e9d24", "#3949ab"];
  const PALETTE_DARK = ["#74a9ff", "#ffa94d", "#69db7c", "#da77f2", "#3bc9db", "#d2a679", "#f783ac", "#a5b4c4",
                        "#d8f5a2", "#91a7ff"];
  const color = (i) => (document.documentElement.dataset.theme === "dark" ? PALETTE_DARK : PALETTE)[i % PALETTE.length];
  const LIVE_REDRAW_MS = 250; // a zoomed or smoothed chart redraws fully for live points at most 4×/s
  const LIVE_HEADROOM = 0.04; // a live chart's axes reach at least this fraction of their span past the data,
  const LIVE_AHEAD_S = 120; // and room for this long at the observed live rate (so full redraws are rare),
  const LIVE_AHEAD_MAX = 0.25; // at most this fraction of the span
  const MARKS_MS = 1000; // a chart redraws for changed marks at most once a second (live points are drawn at once)
  const MARKS_SLACK_MS = 300; // deferred marks: drawn in the next live step's frame, or by a timer this much later
  const MERGE_MARKS = 40; // more marks than this on a chart: one Plotly path shape per look (Plotly's cost is per shape)
  const LABEL_SLOTS = 8; // marker labels are drawn in slots of this many, so that Plotly redraws only changed ones
  const TAIL_CHUNK = 32; // live points per piece of a drawn tail (each update rewrites only the last piece)
  const PENDING_MAX = 2000; // live points held for an undrawn chart before it redraws fully instead
  const TABLE_ROWS = 1000;
  const MODEBAR_PX = 200; // the width of the charts' mode bar (plotkit.js CONFIG), top right
  const LABEL_CHAR_PX = 5.6; // a marker label's width per character (9 px font), to tell when two would overprint
  // The room above the plot for marker labels (rewinds, overlays), kept whether or not a mark has a label yet: a
  // chart's first label (the anomalies' marks, read after the first draw; a live run's first anomaly) is then
  // drawn in place. Room that came with the first label moved the plot area, a full Plotly redraw: 40-70 ms for
  // the loss chart of a 20-chart page, the live view's long tasks (bench/liveview.py --charts 20).
  const LABEL_ROW_PX = 22;
  const EMPTY = {steps: [], values: [], nfSteps: [], nfKinds: []};
  const BUSY = {starting: "the run is starting… (data, model)", compiling: "compiling… the first step follows"};

  const merge = (a, b, from, to) => { // a's points outside [from, to], b's inside
    const i = Obs.lowerBound(a.steps, from), j = Obs.lowerBound(a.steps, to + 1);
    const k = Obs.lowerBound(a.nfSteps, from), l = Obs.lowerBound(a.nfSteps, to + 1);
    return {steps: a.steps.slice(0, i).concat(b.steps, a.steps.slice(j)),
            values: a.values.slice(0, i).concat(b.values, a.values.slice(j)),
            nfSteps: a.nfSteps.slice(0, k).concat(b.nfSteps, a.nfSteps.slice(l)),
            nfKinds: a.nfKinds.slice(0, k).concat(b.nfKinds, a.nfKinds.slice(l))};
  };

  // A mark's shape, kept beside the mark (a source keeps an unchanged mark's object: anomalies.js) while its x and
  // colour stay: under a detector storm a chart's marks, hundreds, are laid out again once a second with a few new,
  // and making every shape, look and path piece anew each time was half the live view's JS garbage (and half its
  // minor GCs, bench/liveview.py --heap-profile). x0, x1: axis units (x1 === x0: a line).
  const shapeCache = new WeakMap(); // mark -> {x0, x1, color, band, look, seg, line, fill, px, pxSeg}
  const markShape = (o, x0, x1) => {
    const had = shapeCache.get(o);
    if (had && had.x0 === x0 && had.x1 === x1 && had.color === o.color) return had;
    const band = x1 !== x0, fill = o.color || "rgba(255,160,0,0.18)";
    const line = band ? {width: 0} : {color: o.color || "#ef6c00", width: 1.5};
    const c = {x0, x1, color: o.color, band, line, fill, px: null, pxSeg: "",
               look: band ? "rect|below|" + fill : "line|" + line.color,
               seg: band ? `M${x0},0H${x1}V1H${x0}Z` : `M${x0},0V1`};
    shapeCache.set(o, c);
    return c;
  };
  const shapeOf = (c) => c.band // (a Plotly shape of its own: made anew, Plotly may keep what it is given)
    ? {type: "rect", xref: "x", yref: "paper", x0: c.x0, x1: c.x1, y0: 0, y1: 1, layer: "below", fillcolor: c.fill,
       line: {width: 0}}
    : {type: "line", xref: "x", yref: "paper", x0: c.x0, x1: c.x0, y0: 0, y1: 1, line: {...c.line}};

  // Many marks as one Plotly path shape per look (colour, width, layer): Plotly lays out and draws every shape on
  // each change, ~50 µs a shape, which hundreds of anomaly marks made the cost of every marks redraw. Each merged
  // shape's marks (markShape's, x in axis units) are kept beside it (marksOf) for drawShapes, which draws them in
  // pixels without parsing the path string again.
  const marksOf = new WeakMap(); // merged path shape -> {rects, marks}
  const merged = (cached) => {
    const byLook = new Map();
    for (const c of cached) {
      let s = byLook.get(c.look);
      if (!s) {
        s = {type: "path", xref: "x", yref: "paper", path: "", line: {...c.line},
             ...(c.band ? {fillcolor: c.fill, layer: "below"} : {})};
        byLook.set(c.look, s);
        marksOf.set(s, {rects: c.band, marks: []});
      }
      s.path += c.seg;
      marksOf.get(s).marks.push(c);
    }
    return [...byLook.values()];
  };

  // A label group's hover text, kept while the group holds the same marks (a storm's groups run to hundreds of
  // marks: their texts, made anew at each marks redraw, were garbage too).
  const hovers = new WeakMap(); // a group's first mark -> {marks, text}
  const groupHover = (g) => {
    const had = hovers.get(g[0]);
    if (had && had.marks.length === g.length && had.marks.every((o, i) => o === g[i])) return had.text;
    const text = Obs.groupHover(g);
    hovers.set(g[0], {marks: g, text});
    return text;
  };

  class LineChart {
    // ctx: {store, schedule, view, xaxis, registry, bounds, rewinds, chartAction, zoomDrawn}; spec: {id?, title,
    // metrics, optional, extra_prefix, secondary, topic, note}; parent: the element the chart is appended to.
    constructor(ctx, spec, parent) {
      this.ctx = ctx;
      this.id = spec.id || spec.metrics[0];
      this.spec = spec;
      this.secondary = new Set(spec.secondary || []);
      this.optional = new Set(spec.optional || []);
      this.items = []; // {name, series, color, secondary, pending, zoom, ema}
      this.full = true; this.dirty = true; this.lastFull = 0; this.timer = null; this.remark = false;
      this.lastMarks = 0; this.marksTimer = null; this.revision = 0;
      this.rangeRev = 0; this.stale = false; this.abort = null; this.zoomPending = false;
      this.plotly = false; // drawn by Plotly (else, if drawn, by the light renderer: Obs.sketch, until Plotly loads)
      this.visible = this.observed = !window.IntersectionObserver; // (the observer says so once it has looked)
      this.pointer = false; // a pointer is over the plot: hover on, every redraw through Plotly
      this.live = false; // live points have arrived: the axes keep headroom for the next ones
      this.info = ctx.registry.info(this.id);
      this.build(parent);
      this.width = this.plot.clientWidth || 600;
      for (const name of spec.metrics) this.addTrace(name); // history requests first: they overlap the drawing
      // No empty plot first (a whole Plotly render each): the chart's first redraw creates it, once on screen.
      this.height = this.plot.clientHeight || 260; // (cached too: legendY read it on every redraw, a forced layout)
      if (window.ResizeObserver) {
        new ResizeObserver(() => {
          this.width = this.plot.clientWidth || this.width; this.height = this.plot.clientHeight || this.height;
        }).observe(this.plot);
      }
      Obs.watchSeen(this.box, (seen) => { // (its first answer: this.visible above)
        this.visible = seen; this.observed = true;
        if (seen && this.stale) this.setRange();
        else this.ctx.schedule(); // catch up on what came while off screen (and first paint counts it)
      });
      // A chart drawn by the light renderer (Plotly not yet loaded) that the user reaches for loads Plotly now.
      for (const type of ["pointerdown", "touchstart", "focusin"]) {
        this.plot.addEventListener(type, () => { if (!this.plotly) Obs.plotly.load(); }, {passive: true});
      }
      Obs.plotly.ready(() => { if (this.lastFull && !this.plotly) { this.full = true; this.dirty = true; this.ctx.schedule(); } });
      this.plot.addEventListener("pointerenter", () => {
        // Hover on at once, without redrawing (a redraw here re-made the marks' labels under a click in flight);
        // a full redraw only where live points were appended in place, which Plotly's hover copy lacks.
        this.pointer = true;
        if (!this.plotly) { Obs.plotly.load(); return; }
        if (this.lastFull) Plotly.relayout(this.plot, {hovermode: "x unified"});
        if (this.appended) { this.full = true; this.dirty = true; this.ctx.schedule(); }
      });
      this.plot.addEventListener("pointerleave", () => { this.pointer = false; });
    }

    build(parent) {
      const slug = Obs.slug(this.id), title = this.spec.title || this.info.title;
      const box = document.createElement("figure");
      box.className = "chart";
      box.dataset.metric = this.id;
      box.setAttribute("aria-labelledby", "title-" + slug);
      box.setAttribute("aria-describedby", "meaning-" + slug);
      box.innerHTML = '<div class="chart-head"><h3><span class="name"></span> <span class="unit"></span></h3>' +
        '<span class="note" role="status"></span><div class="chart-tools" role="group">' +
        '<button type="button" class="tool log" aria-pressed="false">log y</button>' +
        '<button type="button" class="tool up">↑</button><button type="button" class="tool down">↓</button>' +
        '<button type="button" class="tool remove">✕</button></div></div>' +
        '<p class="meaning"></p><div class="plot"></div>' +
        '<details class="glossary"><summary>What is this?</summary><p></p></details>' +
        '<details class="table-alt"><summary>Data table</summary><div class="table-wrap" tabindex="0"></div></details>';
      const q = (s) => box.querySelector(s);
      q("h3").id = "title-" + slug;
      q(".name").textContent = title;
      q(".name").title = this.id;
      q(".unit").textContent = this.info.unit ? "(" + this.info.unit + ")" : "";
      q(".meaning").id = "meaning-" + slug;
      q(".meaning").textContent = this.info.meaning ? this.info.meaning[0].toUpperCase() + this.info.meaning.slice(1) +
        "." : this.id;
      const gloss = this.ctx.registry.glossary(this.spec.topic || this.info.topic);
      q(".glossary p").textContent = gloss;
      q(".glossary").hidden = !gloss;
      q(".chart-tools").setAttribute("aria-label", "Chart: " + title);
      const act = (sel, label, fn) => { const b = q(sel); b.setAttribute("aria-label", label); b.title = label;
                                        b.addEventListener("click", fn); };
      act(".log", "log y (logarithmic axis) for " + title, () => this.ctx.view.toggleLog(this.id));
      act(".up", "Move " + title + " earlier", () => this.ctx.chartAction(this.id, "up"));
      act(".down", "Move " + title + " later", () => this.ctx.chartAction(this.id, "down"));
      act(".remove", "Remove the " + title + " chart", () => this.ctx.chartAction(this.id, "remove"));
      q(".table-alt").addEventListener("toggle", () => this.renderTable());
      this.box = box; this.title = title;
      if (Obs.downloadMenu) Obs.downloadMenu(this, q(".chart-tools")); // (downloads.js)
      this.plot = q(".plot");
      this.plot.id = "chart-" + slug;
      this.els = {note: q(".note"), log: q(".log"), table: q(".table-alt")}; // (written or read at every redraw)
      parent.appendChild(box);
    }

    // Does series `name` belong here as an extra trace (once the run has it)?
    wants(name) {
      if (this.items.some((it) => it.name === name)) return false;
      if (this.optional.has(name)) return true;
      const p = this.spec.extra_prefix;
      return !!p && name.startsWith(p) && name.length > p.length && !name.slice(p.length).includes("/");
    }

    resolution() { // points per window = the plot's pixel width: a bucket's min and max every two pixels
      return Math.max(100, Math.min(4000, Math.round(this.width || 600))); // (cached: reading it forces a layout)
    }

    addTrace(name) {
      if (this.items.some((it) => it.name === name)) return;
      const item = {name, index: this.items.length, secondary: this.secondary.has(name),
                    pending: null, zoom: null, ema: null};
      this.items.push(item);
      item.series = this.ctx.store.want(name, this, {points: this.resolution()});
      this.full = true; this.dirty = true;
      this.ctx.schedule();
    }

    destroy() {
      for (const it of this.items) this.ctx.store.release(it.name, this);
      if (this.abort) this.abort.abort();
      if (this.plotly) Plotly.purge(this.plot);
      this.box.remove();
    }

    reset(s, toStep) {
      this.liveOnly = false;
      if (toStep !== undefined) { // a rewind: zoomed points past it are superseded too
        for (const it of this.items) {
          if (it.series !== s || !it.zoom) continue;
          const z = it.zoom, i = Obs.lowerBound(z.steps, toStep + 1), j = Obs.lowerBound(z.nfSteps, toStep + 1);
          z.steps.length = i; z.values.length = i; z.nfSteps.length = j; z.nfKinds.length = j;
        }
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
      if (this.full) { this.ctx.schedule(); return; } // the next full redraw reads them
      if (this.ctx.view.range) { this.full = true; this.liveOnly = true; this.ctx.schedule(); return; }
      const it = this.items.find((i) => i.series === s);
      if (!it) return;
      const p = it.pending || (it.pending = {x: [], y: [], nfx: [], nfk: []});
      p.x.push(...add.x); p.y.push(...add.y); p.nfx.push(...add.nfx); p.nfk.push(...add.nfk);
      if (p.x.length + p.nfx.length > PENDING_MAX) { this.full = true; this.liveOnly = true; } // (a hidden tab)
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
      // copies: Plotly.extendTraces appends to a trace's arrays in place, which must never be the store's
      if (!b || !values.some((v) => v > b.max)) return {x: steps.slice(), y: values.slice(), ox: [], oy: []};
      const out = {x: [], y: [], ox: [], oy: []};
      values.forEach((v, i) => { if (v > b.max) { out.ox.push(steps[i]); out.oy.push(v); }
                                 else { out.x.push(steps[i]); out.y.push(v); } });
      return out;
    }

    traces() {
      const xa = this.ctx.xaxis, sm = this.ctx.view.smooth, multi = this.items.length > 1, t = Obs.theme();
      const lines = [], marks = [], oob = [], smooth = [];
      this.oobTotal = 0; this.nonPositive = 0;
      for (const it of this.items) {
        const d = this.data(it), p = this.split(it.name, d.steps, d.values);
        if (p.x.length > 4 * this.resolution()) [p.x, p.y] = Obs.minmax(p.x, p.y, this.resolution());
        const unit = this.ctx.registry.info(it.name).unit, label = this.label(it.name);
        const X = xa.toX(p.x), yaxis = it.secondary ? "y3" : "y";
        const hover = unit === "fraction" ? "%{y:.2~%}" : "%{y:.5~g}" + (unit ? " " + unit : "");
        lines.push({x: X, y: p.y, type: "scatter", mode: "lines", name: label, yaxis, legendgroup: it.name,
                    showlegend: multi && !sm, opacity: sm > 0 ? 0.28 : 1, hovertemplate: hover,
                    line: {width: it === this.items[0] ? 1.5 : 1.1, color: color(it.index), dash: it.secondary ? "dot" : "solid"}});
        marks.push({x: xa.toX(d.nfSteps), y: d.nfSteps.map(() => 1), text: d.nfKinds.slice(), yaxis: "y2",
                    type: "scatter", mode: "markers", showlegend: false, name: label + " non-finite",
                    legendgroup: it.name, hovertemplate: "%{text}",
                    marker: {color: t.red, symbol: "x", size: 9, line: {color: color(it.index), width: 1}}});
        oob.push({x: xa.toX(p.ox), y: p.ox.map(() => 1), text: p.oy.map((v) => Obs.fmt(v)), yaxis: "y2",
                  type: "scatter", mode: "markers", showlegend: false, name: label + " impossible",
                  legendgroup: it.name, hovertemplate: "impossible: %{text}",
                  marker: {color: t.amber, symbol: "triangle-up-open", size: 9}});
        this.oobTotal += p.ox.length;
        if (this.ctx.view.log.has(this.id)) this.nonPositive += p.y.filter((v) => v <= 0).length;
        if (sm > 0) {
          it.ema = Obs.ema(p.y, sm);
          smooth.push({x: X, y: it.ema.y, type: "scatter", mode: "lines", name: label + " (smoothed)", yaxis,
                       legendgroup: it.name, showlegend: multi, hovertemplate: hover,
                       line: {width: 1.8, color: color(it.index), dash: it.secondary ? "dot" : "solid"}});
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
      // Margins computed here, not by Plotly's automargin: that costs a second layout pass on every redraw.
      const axis = {gridcolor: t.grid, zerolinecolor: t.grid, linecolor: t.grid, automargin: false,
                    tickfont: {color: t.muted, size: 11}, uirevision: this.rangeRev};
      const lay = {margin: this.margins(traces, sec, multi, xa.mode === "time"), showlegend: !!multi,
                   legend: {orientation: "h", x: 0, y: multi ? this.legendY() : 1, yanchor: "bottom", font: {size: 10}},
                   hovermode: this.pointer ? "x unified" : false, uirevision: "keep",
                   dragmode: Obs.coarsePointer() ? false : "zoom",
                   paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)", font: {color: t.fg},
                   hoverlabel: {bgcolor: t.card, font: {color: t.fg}},
                   xaxis: {...axis, title: {text: xa.title(), font: {size: 11, color: t.muted}}, type: xa.axisType(),
                           hoverformat: xa.mode === "time" ? "%Y-%m-%d %H:%M:%S" : ",d"},
                   yaxis: {...axis, type: log ? "log" : "linear", exponentformat: "e"},
                   yaxis2: {overlaying: "y", range: [0, 1.05], visible: false, fixedrange: true}};
      if (range) { lay.xaxis.range = range; lay.xaxis.autorange = false; } else lay.xaxis.autorange = true;
      if (!range && traces && this.liveish() && xa.mode !== "time") this.headroom(lay.xaxis, traces);
      if (sec) {
        const second = this.items.filter((it) => it.secondary), names = second.map((it) => this.label(it.name));
        const fractions = second.every((it) => this.ctx.registry.info(it.name).unit === "fraction"); // MFU: 21%
        lay.yaxis3 = {...axis, overlaying: "y", side: "right", exponentformat: "e", showgrid: false,
                      title: {text: names.join(", "), font: {size: 10}}, ...(fractions ? {tickformat: ".1~%"} : {})};
      }
      if (traces) { // the y axes fit what is visible, not the whole run (and a flat line is not drawn at 0)
        this.fitY(lay.yaxis, traces, "y", range, log);
        if (lay.yaxis3) this.fitY(lay.yaxis3, traces, "y3", range, false);
      }
      this.marks(lay, t, traces);
      return lay;
    }

    // Room for the tick labels (≈6.5 px a character at 11 px: Plotly's "e" notation keeps them short), the
    // right-hand axis and its title, and the legend's rows above the plot.
    margins(traces, sec, multi, time) {
      const chars = (name) => {
        let lo = Infinity, hi = -Infinity;
        for (const tr of traces || []) {
          if ((tr.yaxis || "y") !== name || tr.mode !== "lines") continue;
          for (const v of tr.y) { if (v < lo) lo = v; if (v > hi) hi = v; }
        }
        if (!(hi >= lo)) return 4;
        const label = (v) => (Math.abs(v) >= 1e4 || (v !== 0 && Math.abs(v) < 1e-3) ? v.toExponential(2) : v.toPrecision(3))
          .replace(/\.?0+(e|$)/, "$1").length;
        return Math.max(label(lo), label(hi), label((lo + hi) / 2)) + 1;
      };
      const px = (n) => Math.min(96, Math.max(34, Math.round(10 + 6.5 * n)));
      let top = this.labelRow() ? LABEL_ROW_PX : 8; // marker labels (rewinds, overlays) sit just above the plot
      if (multi) {
        const width = this.items.reduce((a, it) => a + 44 + 6 * this.label(it.name).length, 0);
        const rows = Math.ceil(width / Math.max(200, (this.width || 600) - 60));
        top += 20 * rows;
        // the legend's first row reaching under the mode bar (top right; a phone's narrow chart): room above it
        if (rows > 1 || px(chars("y")) + width > (this.width || 600) - MODEBAR_PX) top += 30;
      }
      return {l: px(chars("y")), r: sec ? px(chars("y3")) + 14 : 12, t: top, b: time ? 52 : 38};
    }

    labelRow() { return true; } // the row for marker labels is kept (LABEL_ROW_PX); a chart that has none: false

    legendY() { // above the marker labels' row (in paper units of the plot's height)
      return this.labelRow() ? 1 + 16 / Math.max(80, (this.height || 260) - 80) : 1;
    }

    fitY(axis, traces, name, range, log) {
      let lo = Infinity, hi = -Infinity;
      for (const tr of traces) {
        if ((tr.yaxis || "y") !== name || tr.mode !== "lines") continue;
        const i = range ? Obs.lowerBound(tr.x, range[0]) : 0, j = range ? Obs.lowerBound(tr.x, range[1] + 1e-9) : tr.x.length;
        for (let k = Math.max(0, i - 1); k < Math.min(tr.y.length, j + 1); k++) {
          const v = tr.y[k];
          if (log && !(v > 0)) continue;
          if (v < lo) lo = v;
          if (v > hi) hi = v;
        }
      }
      if (!(hi >= lo)) return;
      // Plotly's autorange does well, but for a live chart (its range keeps room for the next points)
      if (!range && !this.liveish() && hi - lo > 1e-9 * Math.max(Math.abs(hi), Math.abs(lo))) return;
      if (log) { lo = Math.log10(lo); hi = Math.log10(hi); }
      const pad = (hi - lo) * 0.06 || (log ? 0.3 : Math.abs(hi) * 0.5) || 1;
      axis.range = [lo - pad, hi + pad];
      axis.autorange = false;
    }

    // Live points are coming (or will: the run trains and its trainer's heartbeat gives a rate): the axes keep room
    // for them, drawn in place.
    liveish() { return this.live || (this.ctx.runState === "training" && this.ctx.stepsPerS > 0); }

    headroom(axis, traces) { // a live chart's x axis: the run so far and room for the next points past it
      let lo = Infinity, hi = -Infinity;
      for (const tr of traces) {
        if (tr.mode !== "lines" || !tr.x.length) continue;
        lo = Math.min(lo, tr.x[0]); hi = Math.max(hi, tr.x[tr.x.length - 1]);
      }
      if (!(hi > lo)) return;
      let ahead = (hi - lo) * LIVE_HEADROOM, perS = 0;
      const a = this.liveFrom, b = this.liveTo, sps = this.ctx.stepsPerS;
      if (a && b && b.t - a.t > 2000) { // x units a second, from the live points seen so far
        const [xa, xb] = this.ctx.xaxis.toX([a.step, b.step]);
        perS = (xb - xa) / ((b.t - a.t) / 1000);
      } else if (sps > 0) { // else from the trainer's heartbeat (its steps/s)
        const s = this.items[0] && this.items[0].series, at = a ? a.step : s && s.steps.length ? s.steps[s.steps.length - 1] : 0;
        const [xa, xb] = this.ctx.xaxis.toX([at, at + sps * 10]);
        perS = (xb - xa) / 10;
      }
      if (perS > 0) ahead = Math.min((hi - lo) * LIVE_AHEAD_MAX, Math.max(ahead, perS * LIVE_AHEAD_S));
      axis.range = [lo, hi + ahead];
      axis.autorange = false;
    }

    marks(lay, t, traces) { // rewinds and feature overlays (anomalies, annotations, interventions): Obs.setOverlays
      const xa = this.ctx.xaxis, x = (step) => xa.xOf(step);
      const rw = this.ctx.rewinds || [];
      lay.shapes = rw.map((r) => ({type: "line", xref: "x", yref: "paper", x0: x(r.to_step), x1: x(r.to_step),
                                   y0: 0, y1: 1, line: {color: t.muted, width: 1, dash: "dash"}}));
      lay.annotations = [];
      // a rewind's label (centred on its line) folds with close command and anomaly labels too
      const folding = rw.map((r, i) => ({id: "rewind-" + i, x0: r.to_step, textColor: t.muted, anchor: "center",
                                         label: r.label || `↺ ${r.from_step}→${r.to_step}`, collapse: true}));
      const cached = [];
      for (const o of Obs.overlaysFor(this)) {
        const x0 = x(o.x0);
        cached.push(markShape(o, x0, o.x1 !== undefined && o.x1 !== o.x0 ? x(o.x1) : x0));
        if (o.label && o.collapse) folding.push(o);
        else if (o.label) lay.annotations.push(this.markLabel(x, [o]));
      }
      lay.shapes.push(...(cached.length > MERGE_MARKS && xa.mode !== "time" ? merged(cached) : cached.map(shapeOf)));
      // close labels fold into one at this zoom (a click on it zooms in on them; its hover lists them all)
      const px = this.pixels(lay, traces);
      this.groups = new Map();
      for (const g of Obs.labelGroups(folding, (step) => px(x(step)), LABEL_CHAR_PX)) {
        lay.annotations.push(this.markLabel(x, g));
        if (g.length > 1) this.groups.set(this.groupId(g), g);
      }
      // Labels in slots (unused ones empty, of no size, at the first label): the list's length stays as it was when
      // a label comes or goes, and Plotly.react redraws only the changed labels and no trace (a new length, a
      // change of `visible` or of a label's refs would redraw the whole chart, points appended in place lost).
      const at = lay.annotations.length ? lay.annotations[0].x : 0;
      while (lay.annotations.length % LABEL_SLOTS) {
        lay.annotations.push({text: "", xref: "x", yref: "paper", x: at, y: 1, yanchor: "bottom", xanchor: "left",
                              showarrow: false, borderpad: 0, borderwidth: 0});
      }
    }

    groupId(g) { return "group:" + g.map((o) => o.id).join(","); }

    // Redraw for changed marks only: the drawn traces and axes as they are (points appended in place stay), only
    // shapes and labels new (in the label row kept above the plot). False before Plotly has drawn: a full redraw.
    remarkInPlace() {
      const gd = this.plot, fl = gd._fullLayout;
      if (!this.plotly || !fl || !fl.xaxis || !gd.layout) return false;
      const lay = {...gd.layout};
      this.marks(lay, Obs.theme(), null);
      // the same labels: the shapes alone, drawn by the page itself (the layout holds them too, for Plotly's next
      // full redraw and whoever reads the chart); new labels on a chart no pointer is over: the labels too
      // (drawLabels); else Plotly.react, which redraws only the changed labels and shapes. (Plotly.react for the
      // marks that came after a chart's first Plotly draw, the anomalies' read at load, cost 22-64 ms a chart on a
      // 20-chart page: the long task of the live view's first second, bench/liveview.py --charts 20.)
      const sameLabels = Obs.sameJSON(lay.annotations, gd.layout.annotations || []);
      const linear = fl.xaxis.type === "linear";
      if (linear && (sameLabels || !this.pointer)) {
        this.inPlaceAxes = this.inPlaceAxes || this.axesKey();
        gd.layout.shapes = lay.shapes;
        this.drawShapes(lay.shapes);
        if (!sameLabels) {
          if (!this.ownLabels) this.plotlyLabels = gd.layout.annotations || []; // (what Plotly drew)
          gd.layout.annotations = lay.annotations;
          this.drawLabels(lay.annotations);
        }
      } else if (sameLabels) { // (a wall-time axis: a relayout of the shapes only)
        Plotly.relayout(gd, {shapes: lay.shapes});
      } else {
        this.dropLabels(); // (Plotly's labels again, diffed against what it drew)
        Plotly.react(gd, gd.data, lay, Obs.plotConfig());
        if (this.ownShapes) this.drawShapes(lay.shapes); // (Plotly's, hidden, may be older: ours stay in charge)
      }
      return true;
    }

    // A chart's new labels, drawn by the page over the chart (Plotly's hidden until it draws labels again):
    // Plotly.react for a label change derives the whole figure's defaults and lays the labels out, 5-9 ms, once a
    // second on a live chart whose anomalies keep changing (and 22-64 ms for a chart's first marks on a big page).
    // Each label as Plotly's annotation (g.annotation with its g.annotation-text-g), at the same place (its x,
    // above the plot), with Plotly's hover box (Plotly.Fx.loneHover, as Plotly's own labels do) and the same click.
    // A label drawn before with the same look and place is kept as it is, and one that went is made into a new one
    // (a storm's marks change once a second while most labels stay: made anew, each was styled and laid out anew,
    // and new elements were garbage for Blink's heap); the hover text and the click's target are its data.
    drawLabels(annotations) {
      const gd = this.plot, fl = gd._fullLayout, z = fl._size, xa = fl.xaxis;
      const svg = this.ownSvg("labelSvg", "obs-labels", true); // (first: the labels' elements come first)
      if (this.labelElsOf !== svg) { this.labelEls = new Map(); this.labelElsOf = svg; } // (a new layer: none kept)
      const family = (fl.font && fl.font.family) || "sans-serif";
      const out = [], kept = new Map(), todo = [];
      for (const a of annotations) {
        if (!a.text) continue; // (an unused slot)
        const attrs = {x: (z.l + xa.c2p(a.x)).toFixed(1), y: z.t - 3, "font-size": 9, "font-family": family,
                       fill: (a.font && a.font.color) || fl.font.color,
                       "text-anchor": a.xanchor === "center" ? "middle" : "start"};
        const live = !!(a.hovertext || a.captureevents);
        // (the hover text and the click's target are the label's data, read when used: not part of its look)
        const sig = [attrs.x, attrs.y, attrs.fill, attrs["text-anchor"], family, a.text, live].join("\u0000");
        const old = this.labelEls.get(sig);
        if (old) { this.labelEls.delete(sig); kept.set(sig, old); old.obsLabel = a; out.push(old); continue; }
        todo.push(out.length);
        out.push({a, attrs, sig, live});
      }
      // New looks: a label that went is made into one (its text and place written), else a new label is made
      const spare = [...this.labelEls.values()];
      for (const i of todo) {
        const {a, attrs, sig, live} = out[i];
        const g = spare.pop() || this.newLabel();
        const text = g.firstChild.firstChild;
        for (const k in attrs) Obs.putAttr(text, k, attrs[k]);
        Obs.put(text, a.text);
        g.classList.toggle("obs-label-live", live);
        g.obsLabel = a;
        kept.set(sig, g);
        out[i] = g;
      }
      this.labelEls = kept;
      // Into the layer in order, with the fewest moves: labels that went leave it, then each label not already next
      // goes in before the next one kept (replacing them all put every label in anew, each styled and laid out
      // again, at every marks redraw that came with a new label: once a second under a storm).
      const wanted = new Set(out);
      for (const g of [...svg.childNodes]) if (!wanted.has(g)) g.remove();
      let next = svg.firstChild;
      for (const g of out) {
        if (g === next) next = next.nextSibling; else svg.insertBefore(g, next);
      }
      if (!this.ownLabels) { this.ownLabels = true; gd.classList.add("obs-own-labels"); }
    }

    newLabel() { // a page-drawn label's elements, as Plotly's annotation; what it shows and does: its obsLabel
      const inner = Obs.svgEl("g", {class: "annotation-text-g"});
      inner.appendChild(Obs.svgEl("text"));
      const g = Obs.svgEl("g", {class: "annotation obs-label"});
      g.appendChild(inner);
      g.addEventListener("mouseover", () => {
        g.obsHover = !!g.obsLabel.hovertext; // (what it showed: its label may change under the pointer)
        if (g.obsHover) this.labelHover(g, g.obsLabel.hovertext);
      });
      g.addEventListener("mouseout", () => {
        if (g.obsHover) Plotly.Fx.loneUnhover(this.plot._fullLayout._hoverlayer.node());
        g.obsHover = false;
      });
      g.addEventListener("click", () => { if (g.obsLabel.captureevents) this.clickedLabel(g.obsLabel.overlayId); });
      return g;
    }

    labelHover(g, text) { // Plotly's hover box for a label, as Plotly's annotations make it
      const fl = this.plot._fullLayout, hl = fl.hoverlabel || {}, font = hl.font || {};
      const b = g.getBoundingClientRect(), ref = this.plot.getBoundingClientRect();
      Plotly.Fx.loneHover({x0: b.left - ref.left, x1: b.right - ref.left, y: (b.top + b.bottom) / 2 - ref.top, text,
                           color: hl.bgcolor, borderColor: hl.bordercolor, fontFamily: font.family,
                           fontSize: font.size, fontColor: font.color},
                          {container: fl._hoverlayer.node(), outerContainer: fl._paper.node(), gd: this.plot});
    }

    dropLabels() { // Plotly draws the labels again: the layout it is diffed against is what it last drew
      if (!this.ownLabels) return false;
      this.ownLabels = false;
      this.plot.classList.remove("obs-own-labels");
      if (this.labelSvg) this.labelSvg.remove();
      this.labelSvg = null;
      this.plot.layout.annotations = this.plotlyLabels;
      this.plotlyLabels = null;
      return true;
    }

    // A live chart's marks-only redraw with the same labels draws the shapes itself: in two SVGs of its own, one
    // under Plotly's (layer "below": bands) and one over it (lines), each clipped to the plot area, with Plotly's
    // shape layers hidden until its next full redraw draws them all again from the layout. Plotly's own way (a
    // relayout of the shapes) derives the whole figure's defaults again: 9-20 ms a redraw, once a second on a live
    // chart whose marks keep changing. Shapes as marks() makes them: lines and rectangles on x spanning the plot
    // (y in paper units), and merged paths of M, H and V (merged()). The path elements are kept from one marks
    // redraw to the next and only changed attributes written (a storm's marks change once a second, mostly one
    // path's `d`: new elements each time were new styles, layout objects and paint for all, and Blink garbage).
    drawShapes(shapes) {
      const fl = this.plot._fullLayout, z = fl._size, xa = fl.xaxis;
      const px = (v) => xa.c2p(+v).toFixed(1), py = (v) => ((1 - v) * z.h).toFixed(1);
      const layer = (below) => {
        const svg = this.ownSvg(below ? "shapesBelow" : "shapesAbove", "obs-marks", below);
        if (!svg.firstChild) svg.appendChild(Obs.svgEl("svg")); // (a nested svg clips to its box: the plot area)
        const inner = svg.firstChild;
        for (const [k, v] of [["x", z.l], ["y", z.t], ["width", z.w], ["height", z.h]]) Obs.putAttr(inner, k, v);
        return inner;
      };
      // (a mark's piece in pixels is kept beside it while the axes draw it at the same place: xa's scale and offset)
      const y0 = py(0), y1 = py(1), at = [xa.type, xa._m, xa._b, y0, y1].join();
      const mergedPath = (sh) => { // (the page's path shapes are merged()'s)
        const {rects, marks} = marksOf.get(sh);
        let d = "";
        for (const c of marks) {
          if (c.px !== at) {
            c.px = at;
            c.pxSeg = rects ? `M${px(c.x0)},${y0}H${px(c.x1)}V${y1}H${px(c.x0)}Z` : `M${px(c.x0)},${y0}V${y1}`;
          }
          d += c.pxSeg;
        }
        return d;
      };
      const below = [], above = [];
      for (const sh of shapes) {
        const d = sh.type === "path" ? mergedPath(sh)
          : sh.type === "rect" ? `M${px(sh.x0)},${py(sh.y0)}H${px(sh.x1)}V${py(sh.y1)}H${px(sh.x0)}Z`
          : `M${px(sh.x0)},${py(sh.y0)}L${px(sh.x1)},${py(sh.y1)}`;
        const ln = sh.line || {}, w = ln.width === undefined ? 2 : ln.width, dlw = Math.max(w, 3);
        (sh.layer === "below" ? below : above).push({
          d, fill: sh.type === "line" || !sh.fillcolor ? "none" : sh.fillcolor,
          stroke: w > 0 ? ln.color || "#444" : "none", "stroke-width": w > 0 ? w : null,
          "stroke-dasharray": ln.dash === "dash" ? `${3 * dlw}px,${3 * dlw}px` : ln.dash === "dot" ? `${dlw}px,${dlw}px`
            : null});
      }
      for (const [inner, paths] of [[layer(true), below], [layer(false), above]]) {
        while (inner.childNodes.length > paths.length) inner.lastChild.remove();
        paths.forEach((attrs, i) => {
          const path = inner.childNodes[i] || inner.appendChild(Obs.svgEl("path"));
          for (const k in attrs) {
            if (attrs[k] !== null) Obs.putAttr(path, k, attrs[k]);
            else if (path.hasAttribute(k)) path.removeAttribute(k);
          }
        });
      }
      if (!this.ownShapes) { this.ownShapes = true; this.plot.classList.add("obs-own-marks"); }
    }

    dropShapes() { // Plotly draws the shapes again (a full redraw)
      if (!this.ownShapes) return false;
      this.ownShapes = false;
      this.plot.classList.remove("obs-own-marks");
      for (const svg of [this.shapesBelow, this.shapesAbove]) if (svg) svg.remove();
      this.shapesBelow = this.shapesAbove = null;
      return true;
    }

    markLabel(x, g) {
      const o = g[0], many = g.length > 1;
      return {xref: "x", yref: "paper", x: x(o.x0), y: 1, yanchor: "bottom", xanchor: o.anchor || "left",
              showarrow: false, font: {size: 9, color: o.textColor || "#8d4a00"}, text: Obs.groupLabel(g),
              hovertext: many || o.hover ? groupHover(g) : undefined, captureevents: many || !!o.onClick,
              overlayId: many ? this.groupId(g) : o.id};
    }

    // x (axis units) -> pixels from the plot's left edge, for the x range this layout draws (its own, else what
    // autorange will make of the lines).
    pixels(lay, traces) {
      let [lo, hi] = lay.xaxis.autorange === false && lay.xaxis.range ? lay.xaxis.range : [Infinity, -Infinity];
      const fx = !traces && this.plot._fullLayout && this.plot._fullLayout.xaxis; // (marks only: the drawn range)
      if (!(hi > lo) && fx && fx.range) [lo, hi] = fx.range.map((v) => fx.r2l(v));
      if (!(hi > lo)) {
        for (const tr of traces || []) {
          if (tr.mode !== "lines" || !tr.x || !tr.x.length) continue;
          lo = Math.min(lo, tr.x[0]); hi = Math.max(hi, tr.x[tr.x.length - 1]);
        }
      }
      const width = Math.max(50, (this.width || 600) - lay.margin.l - lay.margin.r);
      return hi > lo ? (v) => (v - lo) / (hi - lo) * width : () => 0; // (no extent: every mark at one place)
    }

    clickedLabel(id) {
      const g = this.groups && this.groups.get(id);
      if (!g) { Obs.overlayClicked(id); return; }
      const steps = g.map((o) => o.x0), lo = Math.min(...steps), hi = Math.max(...steps);
      if (hi - lo < 1) { Obs.overlayClicked(g[0].id); return; } // (one step: zooming would not part them)
      const pad = Math.max(2, (hi - lo) * 0.5);
      if (Obs.zoomTo) Obs.zoomTo(Math.max(0, lo - pad), hi + pad); // (the dashboard's)
    }

    // ---------------------------------------------------------------------------------------- drawing
    redraw() {
      if (!this.dirty || !this.visible) return; // off screen: drawn once scrolled into view
      if (this.previewing) { this.preview(); if (!this.full) { this.dirty = false; return; } } // (zoom.js)
      if (!this.lastFull && this.items.some((it) => it.series && it.series.loading)) return; // its reset() calls
      const now = performance.now();
      const smooth = this.ctx.view.smooth > 0;
      if (!this.full && smooth && this.items.some((it) => !it.ema)) this.full = true;
      if (this.remark && !this.plotly) this.full = true;
      const C = Obs.redrawCounts;
      if (!this.full && !this.appendLive()) {
        this.full = true; this.liveOnly = true;
        C.miss[this.missed] = (C.miss[this.missed] || 0) + 1;
      }
      if (this.full && !this.forced() && now - this.lastFull < LIVE_REDRAW_MS && this.liveOnly) {
        if (!this.timer) this.timer = setTimeout(() => { this.timer = null; this.ctx.schedule(); },
                                                 LIVE_REDRAW_MS - (now - this.lastFull));
        return;
      }
      // On a live chart changed marks wait for MARKS_MS since its last marks drawing, and for a frame in which no
      // other chart drew its marks; live points are drawn meanwhile. The next live step's frame past that draws them
      // (a frame of their own was a second frame's style, layout and paint; every chart's in one frame, once a
      // second under an anomaly storm, were the live view's costliest updates); the timer, MARKS_SLACK_MS later, is
      // for a run that has stopped stepping.
      let remark = this.remark && !this.full;
      const frame = this.ctx.frame;
      if (remark && this.live && !this.forced() && (now - this.lastMarks < MARKS_MS ||
                                                    (frame !== undefined && this.ctx.marksFrame === frame))) {
        remark = false;
        if (!this.marksTimer) {
          this.marksTimer = setTimeout(() => { this.marksTimer = null; this.dirty = true; this.ctx.schedule(); },
                                       Math.max(0, MARKS_MS - (now - this.lastMarks)) + MARKS_SLACK_MS);
        }
      }
      if (remark && !this.remarkInPlace()) { remark = false; this.full = true; }
      const pending = this.items.some((it) => it.pending);
      this.dirty = false;
      if (this.full || remark || pending) C[this.full ? "full" : remark ? "remark" : "append"]++;
      if (this.full) {
        const traces = this.traces();
        if (window.Plotly) {
          this.dropTails(); this.dropShapes(); this.dropLabels(); this.inPlaceAxes = null;
          if (!this.plotly) this.plot.replaceChildren(); // the light renderer's drawing, if any
          // a new data revision each full redraw, kept by marks-only ones: Plotly then never recomputes the traces
          // for those (without one, Plotly.react takes every data array as new and redraws every trace)
          Plotly.react(this.plot, traces, {...this.layout(traces), datarevision: ++this.revision}, Obs.plotConfig());
          if (!this.plotly) { this.plotly = true; this.bind(); }
          if (this.zoomCatchUp) { this.zoomCatchUp = false; if (this.ctx.zoomInPlotly) this.ctx.zoomInPlotly(this); }
        } else {
          Obs.sketch(this.plot, traces, this.layout(traces)); // first paint: Plotly takes over once loaded
        }
        this.lastFull = now;
      } // (otherwise appendLive has drawn the live points, and remarkInPlace the marks)
      const drew = this.full || remark; // (by Plotly: else only live points appended to the drawn lines)
      if (drew) { // (else changed marks wait for their turn)
        this.lastMarks = now; this.remark = false;
        if (this.live) this.ctx.marksFrame = frame;
        if (this.marksTimer) { clearTimeout(this.marksTimer); this.marksTimer = null; }
      }
      this.appended = !this.full && (this.appended || pending); // (Plotly's own copy lacks them: hover, redraws)
      this.full = false; this.liveOnly = false;
      this.items.forEach((it) => { it.pending = null; });
      if (drew) Obs.toolbarA11y(this.plot, "Chart tools: " + this.title); // (Plotly's mode bar, made anew)
      this.note();
      if (Obs.downloadLinks && drew) Obs.downloadLinks(this); // (what it links to changes with a full redraw only)
      if (this.zoomPending && !this.fetching) { this.zoomPending = false; this.ctx.zoomDrawn(this); }
      if (this.els.table.open && now - (this.tableAt || 0) > 1000) this.renderTable();
    }

    bind() { // the plot's own events, once Plotly has made it
      this.plot.on("plotly_clickannotation", (ev) => this.clickedLabel(ev.annotation && ev.annotation.overlayId));
      this.plot.on("plotly_relayout", (ev) => this.relayouted(ev));
      // Plotly drew on its own with other axes (a resize, a zoom's preview): what was drawn in place (tails, our
      // marks) is no longer where its points are, and Plotly's lines may lack them: a full redraw draws it all.
      // (A marks redraw keeps the axes: it stays.)
      this.plot.on("plotly_afterplot", () => {
        if (!this.inPlaceAxes || this.axesKey() === this.inPlaceAxes) return;
        this.dropTails(); this.dropShapes(); this.dropLabels(); this.inPlaceAxes = null;
        this.full = true; this.dirty = true; this.ctx.schedule();
      });
    }

    // Live points onto the drawn lines, when every one falls inside the drawn axes of a linear chart with no marks
    // to add, no smoothing and no pointer over it (hover reads Plotly's own copy): true once drawn. The trace's
    // arrays take them too, so the next full redraw (and anyone reading the chart) has every point.
    // They are drawn as a tail: a polyline of our own beside Plotly's line (its look), from the line's last point,
    // holding only the points since Plotly last drew it. Plotly's line, often thousands of points, is never
    // rewritten: rewriting it made a new string of its whole length on every update (the garbage that made the
    // live view's major GC pauses) and had the browser parse it again. A live point is appended to the polyline's
    // point list: no path string to build and parse again, and no style to compute again (a path's `d` is a CSS
    // property: each write of it restyled the path; the tails were over a quarter of the page's heap growth in a
    // live view, bench/liveview.py). A tail is drawn in pieces of TAIL_CHUNK points (minutes of live points before
    // the next full redraw).
    appendLive() {
      const gd = this.plot, fl = gd._fullLayout, todo = [];
      this.missed = "state";
      if (this.pointer || this.ctx.view.smooth > 0 || !fl || !fl.xaxis || !gd._fullData || !this.lastFull) return false;
      const xa = fl.xaxis, within = (v, r) => v >= Math.min(r[0], r[1]) && v <= Math.max(r[0], r[1]);
      this.missed = "x type";
      if (xa.type !== "linear") return false;
      for (const it of this.items) {
        const pend = it.pending;
        if (!pend) continue;
        const b = this.ctx.bounds[it.name], ya = it.secondary ? fl.yaxis3 : fl.yaxis;
        this.missed = "marks or y type"; // (a non-finite or impossible point is a mark: split() by a full redraw)
        if (pend.nfx.length || (b && pend.y.some((v) => v > b.max)) || !ya || ya.type !== "linear") return false;
        // (the pending arrays are this chart's own, dropped once drawn: steps are read as x without a copy)
        const X = this.ctx.xaxis.mode === "step" ? pend.x : this.ctx.xaxis.toX(pend.x);
        const tr = gd._fullData[it.index], drawn = gd.data[it.index];
        this.missed = "x range";
        if (!X.every((x) => within(x, xa.range))) return false;
        this.missed = "y range";
        if (!pend.y.every((y) => within(y, ya.range))) return false;
        this.missed = "no path";
        let tail = this.tails && this.tails.get(it.index);
        if (!tail) {
          const line = tr && gd.querySelector(".trace" + tr.uid + " .js-line");
          if (!line || !line.getAttribute("d") || !drawn || !drawn.x.length) return false;
          tail = {line, path: null, n: 0};
        }
        todo.push({i: it.index, X, Y: pend.y, tail, ya, drawn});
      }
      this.tails = this.tails || new Map();
      this.inPlaceAxes = this.inPlaceAxes || this.axesKey();
      const layer = todo.length ? this.tailLayer() : null, svg = this.tailSvg;
      const add = (piece, x, y) => { const pt = svg.createSVGPoint(); pt.x = x; pt.y = y; piece.points.appendItem(pt); };
      for (const {i, X, Y, tail, ya, drawn} of todo) {
        for (let k = 0; k < X.length; k++) {
          if (!tail.path || tail.n >= TAIL_CHUNK) { // a new piece, from the last point drawn, in the line's look
            const n = drawn.x.length - 1, piece = Obs.svgEl("polyline");
            for (const a of tail.line.attributes) {
              if (a.name !== "d" && a.name !== "class") piece.setAttribute(a.name, a.value);
            }
            piece.setAttribute("class", "obs-tail");
            add(piece, xa.c2p(drawn.x[n]), ya.c2p(drawn.y[n]));
            layer.appendChild(piece);
            if (!tail.path) this.tails.set(i, tail);
            tail.path = piece; tail.n = 0;
          }
          add(tail.path, xa.c2p(X[k]), ya.c2p(Y[k]));
          tail.n++;
          drawn.x.push(X[k]); drawn.y.push(Y[k]);
        }
      }
      return true;
    }

    // The tails' own SVG over Plotly's (below its hover and label layer), in the plot area's coordinates: changing
    // a tail repaints that small drawing only, not Plotly's whole chart with its thousands of points.
    tailLayer() {
      const z = this.plot._fullLayout._size, svg = this.ownSvg("tailSvg", "obs-tails", false);
      if (!svg.firstChild) svg.appendChild(Obs.svgEl("g"));
      Obs.putAttr(svg.firstChild, "transform", `translate(${z.l},${z.t})`); // (written only where it changed)
      return svg.firstChild;
    }

    // An SVG of the page's own (this[key]) over Plotly's first one, or under it, of the plot's size: where the page
    // draws in place (tails, shapes).
    ownSvg(key, cls, below) {
      const fl = this.plot._fullLayout;
      let svg = this[key];
      if (!svg || !svg.isConnected) {
        svg = this[key] = Obs.svgEl("svg", {class: cls, "aria-hidden": "true"});
        const main = this.plot.querySelector(".svg-container > .main-svg");
        if (below) main.before(svg); else main.after(svg);
      }
      Obs.putAttr(svg, "width", fl.width); Obs.putAttr(svg, "height", fl.height);
      return svg;
    }

    // Where the drawn axes put the points: what is drawn in place (tails, our shapes) stays right while this stays
    // the same.
    axesKey() {
      const fl = this.plot._fullLayout || {}, r = (a) => (a && a.range ? a.range.join() : ""), z = fl._size || {};
      return [r(fl.xaxis), r(fl.yaxis), r(fl.yaxis3), z.l, z.t, z.w, z.h].join("|");
    }

    // Plotly draws the lines again (the tails' points are in its data now, or a full redraw is asked for): the
    // tails go.
    dropTails() {
      if (!this.tails || !this.tails.size) return false;
      const layer = this.tailSvg && this.tailSvg.firstChild;
      if (layer) layer.replaceChildren();
      this.tails.clear();
      return true;
    }

    forced() { return (this.zoomPending && !this.fetching) || !this.lastFull; }

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

    renderTable() {
      const det = this.els.table;
      if (!det.open) return;
      this.tableAt = performance.now();
      const range = this.ctx.view.range;
      const cols = this.items.map((it) => Obs.tableColumn(this.data(it), this.label(it.name), ...(range || [])));
      const where = range ? `steps ${Math.floor(range[0])}–${Math.ceil(range[1])}` : "the whole run";
      Obs.renderTable(det.querySelector(".table-wrap"), `${this.title}, ${where}`, cols, TABLE_ROWS);
    }
  }

  Obs.LineChart = LineChart;
  Obs.PALETTE = PALETTE;
  Obs.color = color; // the i-th line colour in the current theme (compare.js: one per run)
})(window.Obs);
