// The light renderer: a chart drawn as one SVG from the same traces and layout a Plotly chart takes, without Plotly
// (its bundle costs ~0.6 s of parsing before anything shows). Line charts draw their first paint with it while the
// bundle loads in the background, then become Plotly charts in place (charts.js); reports' and embeds' charts
// (minichart.js) draw with it only. No hover, zoom or mode bar: what it draws is what Plotly would show at rest.
//   Obs.sketch(node, traces, layout)  draws into `node` (its size), replacing its children.
// It understands what the charts use: scatter traces in lines mode (colour, width, dash, opacity) or markers mode
// ("x" and "triangle-up-open" symbols) on axes "y" (left), "y3" (right, overlaying) and "y2" (fixed paper-like
// range), linear, log and date x axes, linear and log y axes with Plotly's automatic ticks (1-2-5 steps, SI
// suffixes on x, a shared "e" exponent on y), explicit tickvals/ticktext, explicit ranges, shapes (lines and
// rectangles on x, spanning the plot), annotations (labels above the plot) and a horizontal legend on top.
// Traces of other kinds (a forecast band's fill) are drawn as their lines.
"use strict";

window.Obs = window.Obs || {};

(function (Obs) {
  const NS = "http://www.w3.org/2000/svg";
  const MINUS = "\u2212";
  const SI = {3: "k", 6: "M", 9: "B", 12: "T"};

  const el = (tag, attrs, text) => {
    const e = document.createElementNS(NS, tag);
    for (const k in attrs) if (attrs[k] !== undefined && attrs[k] !== null) e.setAttribute(k, attrs[k]);
    if (text !== undefined && text !== null) e.textContent = text;
    return e;
  };
  Obs.svgEl = el;

  const roundUp = (r) => (r <= 2 ? 2 : r <= 5 ? 5 : 10); // Plotly's roundDTick over [2, 5, 10]
  const niceStep = (rough) => {
    const base = Math.pow(10, Math.floor(Math.log10(rough)));
    return base * roundUp(rough / base);
  };
  const minus = (s) => s.replace("-", MINUS);
  const decimals = (dtick) => Math.max(0, Math.min(15, -Math.floor(Math.log10(dtick) + 1e-9)));

  // Plotly's automatic linear ticks: about one per 80 px on x, per 40 px on y (4..9 of them, +1), 1-2-5 steps.
  function linearTicks(lo, hi, len, isY, format) {
    const nt = Math.max(4, Math.min(9, len / (isY ? 40 : 80))) + 1;
    const dtick = niceStep(Math.abs(hi - lo) / nt);
    if (!(dtick > 0) || !Number.isFinite(dtick)) return [];
    const vals = [];
    const slop = Math.abs(hi - lo) * 1e-4; // (Plotly keeps a tick a hair past the end: 1M on a 0..999,999 axis)
    for (let v = Math.ceil((lo - slop) / dtick) * dtick; v <= hi + slop && vals.length < 40; v += dtick) {
      vals.push(Math.abs(v) < dtick * 1e-9 ? 0 : v);
    }
    const maxAbs = Math.max(Math.abs(lo), Math.abs(hi)); // the exponent follows the range's ends, as Plotly's
    const rangeexp = maxAbs > 0 ? Math.floor(Math.log10(maxAbs * 1.0001)) : 0;
    let exp = 0;
    if (Math.abs(rangeexp) > 3) exp = format === "e" ? rangeexp : 3 * Math.round((rangeexp - 1) / 3);
    const scale = Math.pow(10, -exp), digits = decimals(dtick * scale);
    const suffix = exp === 0 ? "" : format === "e" ? "e" + (exp > 0 ? "+" : MINUS) + Math.abs(exp) : (SI[exp] || "e" + exp);
    return vals.map((v) => ({v, text: v === 0 ? "0" : minus(String(+(v * scale).toFixed(digits))) + suffix}));
  }

  // Log axes (range in log10 units): powers of ten, 1-2-5 in between, or linear ticks within one decade.
  function logTicks(lo, hi, len, isY) {
    const nt = Math.max(4, Math.min(9, len / (isY ? 40 : 80))) + 1, rough = Math.abs(hi - lo) / nt, out = [];
    const pow = (p) => (Math.abs(p) > 2 ? "1e" + (p > 0 ? "+" : MINUS) + Math.abs(p) : String(+Math.pow(10, p).toPrecision(3)));
    if (rough > 0.7) {
      const d = Math.ceil(rough);
      for (let p = Math.ceil(lo / d) * d; p <= hi; p += d) out.push({v: p, text: pow(p)});
    } else if (Math.abs(hi - lo) < 1) {
      const a = Math.pow(10, lo), b = Math.pow(10, hi);
      for (const t of linearTicks(a, b, len * 1.5, isY, "e")) if (t.v > 0) out.push({v: Math.log10(t.v), text: t.text});
    } else {
      const digits = rough > 0.3 ? [1, 2, 5] : [1, 2, 3, 4, 5, 6, 7, 8, 9];
      for (let p = Math.floor(lo); p <= hi; p++) {
        for (const m of digits) {
          const v = p + Math.log10(m);
          if (v >= lo && v <= hi) out.push({v, text: m === 1 ? pow(p) : String(m), small: m !== 1});
        }
      }
    }
    return out;
  }

  const TIME_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400,
                      172800, 604800].map((s) => s * 1000);
  function dateTicks(lo, hi, len) { // x in ms since the epoch, UTC
    const nt = Math.max(4, Math.min(9, len / 80)) + 1;
    const step = TIME_STEPS.find((s) => (hi - lo) / s <= nt) || 86400000 * Math.ceil((hi - lo) / nt / 86400000);
    const out = [];
    for (let v = Math.ceil(lo / step) * step; v <= hi && out.length < 40; v += step) {
      const iso = new Date(v).toISOString();
      const day = iso.slice(5, 10), time = step >= 60000 ? iso.slice(11, 16) : iso.slice(11, 19);
      out.push({v, text: step >= 86400000 ? day : hi - lo >= 86400000 ? day + " " + time : time});
    }
    return out;
  }

  const dateNum = (x) => (typeof x === "number" ? x : Date.parse(String(x).replace(" ", "T") + (/Z|[+-]\d\d:?\d\d$/.test(x) ? "" : "Z")));

  // One axis: its data -> pixel mapping and ticks. `range`: the layout's (axis units; log10 for log) or null.
  function axis(spec, kind, lo, hi, len, isY, padded) {
    const type = spec.type || "linear", log = type === "log", date = type === "date";
    const c2l = log ? (v) => (v > 0 ? Math.log10(v) : NaN) : date ? dateNum : (v) => v;
    let r;
    if (spec.autorange === false && Array.isArray(spec.range)) {
      r = date ? spec.range.map(dateNum) : spec.range.slice();
    } else {
      r = [lo, hi];
      if (!(r[1] >= r[0])) r = log ? [0, 1] : [0, 1];
      if (r[1] === r[0]) { const d = Math.abs(r[0]) * 0.5 || (log ? 0.5 : 1); r = [r[0] - d, r[1] + d]; }
      if (padded) { const d = (r[1] - r[0]) * 0.05 / 0.9; r = [r[0] - d, r[1] + d]; } // Plotly's 5% a side
    }
    const [a, b] = r, span = b - a || 1;
    const l2p = isY ? (v) => len - (v - a) / span * len : (v) => (v - a) / span * len;
    let ticks;
    if (Array.isArray(spec.tickvals)) {
      ticks = spec.tickvals.map((v, i) => ({v: c2l(v), text: String((spec.ticktext || spec.tickvals)[i])}));
    } else if (log) ticks = logTicks(a, b, len, isY);
    else if (date) ticks = dateTicks(a, b, len);
    else ticks = linearTicks(a, b, len, isY, spec.exponentformat === "e" ? "e" : "B");
    if (spec.tickformat === ".1~%" || spec.tickformat === ".2~%") {
      ticks = ticks.map((t) => ({...t, text: minus(String(+(t.v * 100).toFixed(1))) + "%"}));
    }
    ticks = ticks.filter((t) => Number.isFinite(t.v) && t.v >= Math.min(a, b) - 1e-4 * span && t.v <= Math.max(a, b) + 1e-4 * span);
    return {c2p: (v) => l2p(c2l(v)), l2p, c2l, ticks, range: r, kind, log};
  }

  function extent(traces, name, key, c2l) {
    let lo = Infinity, hi = -Infinity;
    for (const tr of traces) {
      if (!tr || tr.visible === false || (key === "y" && (tr.yaxis || "y") !== name)) continue;
      if (key === "x" && tr.yaxis === "y2" && !(tr.x || []).length) continue;
      for (const raw of tr[key] || []) {
        const v = c2l(raw);
        if (v < lo) lo = v;
        if (v > hi) hi = v;
      }
    }
    return [lo, hi];
  }

  const DASH = {dot: "3,3", dash: "9,9", dashdot: "9,3,3,3", longdash: "15,15"};
  const MARK = {
    x: (r) => `M${-r},${-r}L${r},${r}M${r},${-r}L${-r},${r}`,
    "triangle-up-open": (r) => `M${-r},${r * 0.6}L0,${-r}L${r},${r * 0.6}Z`,
  };

  // A horizontal legend's items: each trace shown in it, its x and row (rows as wide as `width`).
  function legendLayout(traces, fs, width) {
    const items = [];
    let x = 0, row = 0;
    for (const tr of traces) {
      if (!tr || tr.showlegend === false || !(tr.mode || "lines").includes("lines")) continue;
      const w = 44 + fs * 0.5 * String(tr.name).length;
      if (x > 0 && x + w > width) { x = 0; row++; }
      items.push({tr, x, row});
      x += w;
    }
    return {items, rows: items.length ? row + 1 : 0};
  }

  Obs.sketch = (node, traces, layout, attrs) => {
    const W = Math.max(60, node.clientWidth || 600), H = Math.max(60, node.clientHeight || 260);
    const m = {l: 80, r: 80, t: 100, b: 80, ...(layout.margin || {})};
    // a legend above the plot pushes the top margin as Plotly's does: its rows (19 px at 10 px type), padding
    const lg = layout.legend || {}, lfs = (lg.font || {}).size || 12, lrow = Math.round(lfs * 1.9);
    const legendRows = layout.showlegend ? legendLayout(traces, lfs, W - m.l).rows : 0;
    const legendH = legendRows ? 10 + legendRows * lrow : 0;
    if (legendRows && (lg.y === undefined || lg.y >= 1)) m.t = Math.max(m.t, legendH + 12);
    const pw = Math.max(10, W - m.l - m.r), ph = Math.max(10, H - m.t - m.b);
    const fg = (layout.font || {}).color; // (unset: the page's stylesheet colours .sk-ticks, .sk-grid)
    const xs = layout.xaxis || {}, xlin = xs.type === "log" ? (v) => (v > 0 ? Math.log10(v) : NaN)
      : xs.type === "date" ? dateNum : (v) => v;
    const lineTraces = traces.filter((t) => t && (t.mode || "lines").includes("lines"));
    const X = axis(xs, "x", ...extent(lineTraces.length ? lineTraces : traces, null, "x", xlin), pw, false, false);
    const yaxes = {};
    for (const name of ["y", "y3"]) {
      const spec = layout[name === "y" ? "yaxis" : "yaxis3"];
      if (!spec && name !== "y") continue;
      const s = spec || {}, c2l = s.type === "log" ? (v) => (v > 0 ? Math.log10(v) : NaN) : (v) => v;
      yaxes[name] = axis(s, name, ...extent(lineTraces, name, "y", c2l), ph, true, true);
      yaxes[name].spec = s;
    }
    const y2 = layout.yaxis2 || {range: [0, 1.05]};
    yaxes.y2 = axis({...y2, autorange: false, range: y2.range || [0, 1.05]}, "y2", 0, 1, ph, true, false);

    const svg = el("svg", {class: "sketch", width: W, height: H, viewBox: `0 0 ${W} ${H}`,
                           "font-family": '"Open Sans", verdana, arial, sans-serif', ...(attrs || {})});
    const clipId = "sk" + Math.random().toString(36).slice(2, 9);
    const defs = el("defs");
    const clip = el("clipPath", {id: clipId});
    clip.appendChild(el("rect", {x: 0, y: 0, width: pw, height: ph}));
    defs.appendChild(clip); svg.appendChild(defs);
    const plot = el("g", {transform: `translate(${m.l},${m.t})`});
    svg.appendChild(plot);
    const grid = xs.gridcolor, tickColor = ((xs.tickfont || {}).color) || fg;
    const tickSize = ((xs.tickfont || {}).size) || 12;

    // shapes drawn below the lines (bands), then grid and ticks
    // (many marks come as one path shape per look, charts.js: "M x,0V1" lines, "M x0,0H x1V1H x0Z" bands)
    const shapes = (layout.shapes || []).flatMap((s) => (s.type !== "path" ? [s]
      : [...String(s.path).matchAll(/M([^,]+),0(?:H([^V]+))?V1/g)].map(([, x0, x1]) => (x1 === undefined
        ? {...s, type: "line", x0: +x0, x1: +x0} : {...s, type: "rect", x0: +x0, x1: +x1}))));
    const shapeX = (v) => X.c2p(v);
    for (const s of shapes) {
      if (s.type !== "rect" || s.layer !== "below") continue;
      const a = shapeX(s.x0), b = shapeX(s.x1);
      if (!Number.isFinite(a) || !Number.isFinite(b)) continue;
      plot.appendChild(el("rect", {x: Math.min(a, b), y: 0, width: Math.abs(b - a), height: ph, fill: s.fillcolor || "rgba(0,0,0,0.1)",
                                   "clip-path": `url(#${clipId})`}));
    }
    // (grid, shapes and legend keys are <line>s: a chart's <path>s are its data, one per drawn trace)
    const g = el("g", {class: "sk-grid", stroke: grid, "stroke-width": 1});
    for (const t of X.ticks) { const p = X.l2p(t.v).toFixed(1); g.appendChild(el("line", {x1: p, x2: p, y1: 0, y2: ph})); }
    const Y = yaxes.y;
    for (const t of Y.ticks) { const p = Y.l2p(t.v).toFixed(1); g.appendChild(el("line", {x1: 0, x2: pw, y1: p, y2: p})); }
    if (!Y.log && Y.range[0] < 0 && Y.range[1] > 0) {
      const p = Y.l2p(0).toFixed(1);
      g.appendChild(el("line", {x1: 0, x2: pw, y1: p, y2: p, stroke: Y.spec.zerolinecolor || grid, "stroke-width": 2}));
    }
    plot.appendChild(g);
    const labels = el("g", {class: "sk-ticks", fill: tickColor, "font-size": tickSize});
    for (const t of X.ticks) {
      labels.appendChild(el("text", {x: X.l2p(t.v).toFixed(1), y: ph + 4 + tickSize, "text-anchor": "middle", "data-axis": "x",
                                     "font-size": t.small ? tickSize * 0.75 : undefined}, t.text));
    }
    for (const [name, A] of Object.entries(yaxes)) {
      if (name === "y2" || A.spec.visible === false) continue;
      const right = A.spec.side === "right";
      for (const t of A.ticks) {
        labels.appendChild(el("text", {x: right ? pw + 4 : -4, y: (A.l2p(t.v) + tickSize * 0.35).toFixed(1), "data-axis": name,
                                       "text-anchor": right ? "start" : "end",
                                       "font-size": t.small ? tickSize * 0.75 : undefined}, t.text));
      }
      const title = A.spec.title && A.spec.title.text;
      if (title) {
        const fs = (A.spec.title.font || {}).size || 12, x = right ? pw + m.r - fs : -m.l + fs;
        labels.appendChild(el("text", {x, y: ph / 2, "text-anchor": "middle", "font-size": fs, fill: fg,
                                       transform: `rotate(${right ? 90 : -90},${x},${ph / 2})`}, title));
      }
    }
    const xt = xs.title && xs.title.text;
    if (xt) {
      const f = xs.title.font || {};
      labels.appendChild(el("text", {x: pw / 2, y: ph + m.b - 3, "text-anchor": "middle", "font-size": f.size || 12,
                                     fill: f.color || fg}, xt));
    }
    plot.appendChild(labels);

    // the traces, clipped to the plot area
    const data = el("g", {class: "sk-data", "clip-path": `url(#${clipId})`});
    traces.forEach((tr, i) => {
      if (!tr || tr.visible === false) return;
      const A = yaxes[tr.yaxis || "y"] || Y, mode = tr.mode || "lines", x = tr.x || [], y = tr.y || [];
      const n = Math.min(x.length, y.length);
      if (mode.includes("lines") && n) {
        const line = tr.line || {};
        let d = "", pen = "M", count = 0;
        for (let k = 0; k < n; k++) {
          const px = X.c2p(x[k]), py = A.c2p(y[k]);
          if (!Number.isFinite(px) || !Number.isFinite(py) || y[k] === null) { pen = "M"; continue; }
          d += pen + px.toFixed(1) + "," + py.toFixed(1); pen = "L"; count++;
        }
        data.appendChild(el("path", {class: "sk-line", d, fill: "none", stroke: line.color || "#1f77b4",
                                     "stroke-width": line.width === undefined ? 2 : line.width,
                                     "stroke-dasharray": DASH[line.dash], "stroke-opacity": tr.opacity,
                                     "stroke-linejoin": "round", "data-trace": i, "data-points": count,
                                     "data-name": tr.name}));
      }
      if (mode.includes("markers") && n) {
        const mk = tr.marker || {}, shape = MARK[mk.symbol] || MARK.x, r = (mk.size || 6) / 2;
        const color = mk.color || "#1f77b4", open = String(mk.symbol || "").endsWith("open") || mk.symbol === "x";
        // marker paths: each symbol drawn relative to its point
        const rel = [];
        for (let k = 0; k < n; k++) {
          const px = X.c2p(x[k]), py = A.c2p(y[k]);
          if (Number.isFinite(px) && Number.isFinite(py)) rel.push(shape(r).replace(/(-?[\d.]+),(-?[\d.]+)/g, (_, a, b) =>
            (px + +a).toFixed(1) + "," + (py + +b).toFixed(1)));
        }
        if (rel.length) data.appendChild(el("path", {class: "sk-marks", d: rel.join(""), fill: open ? "none" : color, stroke: color,
                                            "stroke-width": 1.5, "data-trace": i, "data-points": rel.length}));
      }
    });
    plot.appendChild(data);

    // line shapes (rewinds, anomalies) and labels above the plot
    for (const s of shapes) {
      if (s.type === "rect" && s.layer === "below") continue;
      const a = shapeX(s.x0), b = shapeX(s.x1 === undefined ? s.x0 : s.x1);
      if (!Number.isFinite(a)) continue;
      const ln = s.line || {};
      if (s.type === "rect") {
        plot.appendChild(el("rect", {x: Math.min(a, b), y: 0, width: Math.abs(b - a), height: ph, fill: s.fillcolor || "none"}));
      } else if (a >= 0 && a <= pw) {
        plot.appendChild(el("line", {class: "sk-shape", x1: a.toFixed(1), x2: a.toFixed(1), y1: 0, y2: ph, stroke: ln.color || fg,
                                     "stroke-width": ln.width || 1, "stroke-dasharray": DASH[ln.dash]}));
      }
    }
    for (const an of layout.annotations || []) {
      if (an.xref !== "x") continue;
      const a = shapeX(an.x);
      if (!Number.isFinite(a) || a < 0 || a > pw) continue;
      const f = an.font || {};
      plot.appendChild(el("text", {class: "sk-label", x: a.toFixed(1), y: -3, "font-size": f.size || 12, fill: f.color || fg,
                                   "text-anchor": {center: "middle", right: "end"}[an.xanchor] || "start"},
                          String(an.text).replace(/<[^>]*>/g, "")));
    }

    // a horizontal legend above the plot (its y in paper units of the plot's height)
    if (legendRows) {
      const bottom = -((lg.y === undefined ? 1 : lg.y) - 1) * ph; // (its y: paper units, the plot's height)
      const legend = el("g", {class: "sk-legend", "font-size": lfs, fill: fg});
      for (const {tr, x, row} of legendLayout(traces, lfs, W - m.l).items) {
        const y = bottom - legendH + 5 + (row + 0.5) * lrow;
        const line = tr.line || {};
        legend.appendChild(el("line", {x1: x + 5, x2: x + 35, y1: y, y2: y, stroke: line.color, "stroke-width": line.width || 2,
                                       "stroke-dasharray": DASH[line.dash]}));
        legend.appendChild(el("text", {x: x + 40, y: y + lfs * 0.35}, tr.name));
      }
      plot.appendChild(legend);
    }
    node.replaceChildren(svg);
    return svg;
  };
})(window.Obs);
