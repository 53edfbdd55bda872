// The one renderer of every time-series line (dashboard, compare, front page, reports, embeds): a figure — lines,
// point marks, vertical marks and their labels, a legend — drawn on a canvas by uPlot (static/vendor/uPlot.*).
//   Obs.drawFigure(node, traces, layout, on)  draws into `node` (its size); node.data / node.layout are the figure
//                                             drawn (public: feature modules and tests read them)
//   Obs.redrawData(node)                      the same figure again, its lines' x / y and axis ranges changed in
//                                             place (the live append path, chartlive.js): the canvas only
// A figure is plain data, the charts' model (charts.js makes it):
//   trace  {x, y, mode: "lines" | "markers", name, yaxis: "y" | "y2" (0..1, the plot's height) | "y3" (right),
//           showlegend, opacity, line: {width, color, dash}, marker: {color, symbol, size}, text, fill: "tonexty"
//           (a band down to the trace before), meta}
//   layout {margin: {l, r, t, b}, showlegend, xaxis: {range, autorange, type: "linear" | "date", title},
//           yaxis / yaxis3: {range (log10 units on a log axis), type: "linear" | "log"}, shapes: [{type: "line" |
//           "rect", x0, x1, line: {color, width, dash}, fillcolor, layer}], annotations: [{x, text, hovertext,
//           captureevents, overlayId, xanchor, font: {color}}], dragmode}
//   on     {zoom(x0, x1), reset(), label(overlayId), toolbar: [{label, text, fn}], toolbarLabel: its name}
// The same figure's shape (its lines, axes and their types) keeps its uPlot instance: a redraw is setData, no DOM
// work; the axes' ranges actually drawn are written back into node.layout (xaxis.range, yaxis.range).
"use strict";

window.Obs = window.Obs || {};

(function (Obs) {
  const DASH = {dot: [2, 3], dash: [6, 4], solid: null}, FONT = "11px system-ui, sans-serif";
  // A y axis at least as wide as its widest tick label plus the tick and gap (uPlot asks again while its labels
  // change): a fixed 50 px margin cut "0.00125" to ".00125" on a phone
  const measure = Object.assign(document.createElement("canvas").getContext("2d"), {font: FONT});
  const fitLabels = (min) => (u, values) => {
    const widest = Math.max(0, ...(values || []).map((v) => measure.measureText(String(v ?? "")).width));
    return Math.max(min, Math.ceil(widest) + 10);
  };
  // Colours: the page's theme (plotkit.js), else (an embed) the text colour, muted
  const theme = () => {
    if (Obs.theme) return Obs.theme();
    const fg = getComputedStyle(document.body).color || "#333"; return {fg, muted: fg, grid: "rgba(128,128,128,0.25)"};
  };
  // The i-th line's colour in the page's theme: one palette, so a run's colour is the same on every page
  const PALETTE = ["#1f5fbf", "#d9730d", "#2e7d32", "#8e24aa", "#00838f", "#6d4c41", "#c2185b", "#546e7a",
                   "#9e9d24", "#3949ab"];
  const PALETTE_DARK = ["#74a9ff", "#ffa94d", "#69db7c", "#da77f2", "#3bc9db", "#d2a679", "#f783ac", "#a5b4c4",
                        "#d8f5a2", "#91a7ff"];
  Obs.lineColor = (i) => (document.documentElement.dataset.theme === "dark" ? PALETTE_DARK : PALETTE)[i % 10];
  const make = (tag, props) => Object.assign(document.createElement(tag), props);
  const isLine = (t) => t.mode === "lines" && t.x && t.x.length !== undefined;
  // Tick labels as short as the axis needs: 1.2k, 3e-4, 0.25
  const num = (v) => !Number.isFinite(v) ? "" : (v !== 0 && (Math.abs(v) >= 1e4 || Math.abs(v) < 1e-3)
    ? v.toExponential(1).replace(/\.0e/, "e").replace("e+", "e") : String(+v.toPrecision(4))).replace("-", "\u2212");
  // An axis's tick labels, each with the digits the ticks' spacing needs (adjacent labels never read the same):
  // 1e5, 1.05e5, 1.1e5 at a 5,000 spacing; 0.25, 0.3 at 0.05
  const tickLabels = Obs.tickLabels = (vals) => {
    let step = Infinity;
    for (let i = 1; i < vals.length; i++) step = Math.min(step, Math.abs(vals[i] - vals[i - 1]) || Infinity);
    if (!Number.isFinite(step)) return vals.map(num);
    const lead = Math.floor(Math.log10(step) + 1e-9), m = step / 10 ** lead; // m: 1, 2, 2.5 or 5 (uPlot's)
    const e = lead - (Math.abs(m - Math.round(m)) > 1e-6 ? 1 : 0); // (2.5 apart: a digit more, not 3, 5, 8)
    return vals.map((v) => {
      const a = Math.abs(v);
      if (!Number.isFinite(v) || a < step / 2) return Number.isFinite(v) ? "0" : ""; // (0: a float's residue too)
      const s = a >= 1e4 || a < 1e-3
        ? v.toExponential(Math.max(0, Math.floor(Math.log10(a) + 1e-9) - e)).replace(/\.?0+e/, "e").replace("e+", "e")
        : v.toFixed(Math.max(0, -e)).replace(/(\.\d*?)0+$/, "$1").replace(/\.$/, "");
      return s.replace("-", "\u2212");
    });
  };
  // A log axis's ticks, counted from the decade (uPlot's count from the range's start ticked 1024, 2024, 3024…):
  // 1..9 × 10^k in range; where fewer than two are (a zoom), 10..99 × 10^(k-1), and so on down
  const logSplits = (lo, hi, sub = 0) => {
    const out = [], top = 10 ** (sub + 1);
    for (let k = Math.floor(Math.log10(lo)) - sub; lo > 0 && 10 ** k <= hi && out.length < 500; k++) {
      for (let d = Math.max(top / 10, Math.ceil(lo / 10 ** k - 1e-9)); d < top && d * 10 ** k <= hi * (1 + 1e-9); d++) {
        out.push(+(d + "e" + k));
      }
    }
    return out.length > 1 || !(lo > 0) || sub > 9 ? out : logSplits(lo, hi, sub + 1);
  };
  // Its labels: the powers of ten where two are in range, else 1, 2, 5 × 10^k where two are, else every tick; as
  // many as have room (none closer than their widths on x, a line's height on y); as 1e−3 if one is ≥ 1e4 or < 1e-3
  const logLabels = (u, vals, i) => {
    const a = u.axes[i], lead = (v) => +v.toExponential().split("e")[0];
    const pick = new Set([[1], [1, 2, 5]].map((ds) => vals.filter((v) => ds.includes(lead(v))))
      .find((p) => p.length > 1) || vals);
    const expo = [...pick].some((v) => v >= 1e4 || v < 1e-3);
    let last = -Infinity, room = 0;
    return vals.map((v) => {
      const s = (expo ? v.toExponential().replace("e+", "e") : String(v)).replace("-", "\u2212");
      const at = u.valToPos(v, a.scale), w = a.side % 2 ? 14 : measure.measureText(s).width;
      if (!pick.has(v) || Math.abs(at - last) < (w + room) / 2 + 6) return "";
      [last, room] = [at, w];
      return s;
    });
  };
  // A log range's end on one significant digit: 140.8 → 100
  const round1 = (v, f, k = 10 ** Math.floor(Math.log10(v))) => +(f(+(v / k).toFixed(9)) * k).toPrecision(12);

  // A log axis only over a value > 0 (uPlot's log ticks over an empty scale, its -1..1, never end: RangeError)
  const logOf = (lay, lines, k, a = lay[k[0] + "axis" + k.slice(1)]) => !!(a && a.type === "log") && lines.some(
    (t) => (k === "x" || (t.yaxis === "y3") === (k === "y3")) && [].some.call(k === "x" ? t.x : t.y, (v) => v > 0));
  // Half the width of an x axis's last tick label (CSS px): the room right of the plot that keeps it whole
  const halfLast = (labels) => {
    const last = labels && labels.filter(Boolean).pop();
    return last ? Math.ceil(measure.measureText(last).width / 2) + 1 : 0;
  };

  // Every line's points on one x (uPlot draws aligned columns): a single line as it is, several joined (gaps null,
  // drawn across).
  function columns(lines) {
    if (lines.length === 1) return [lines[0].x, lines[0].y];
    const x0 = lines[0].x;
    if (lines.every((t) => t.x === x0 || (t.x.length === x0.length && t.x.every((v, i) => v === x0[i])))) {
      return [lines[0].x, ...lines.map((t) => t.y)];
    }
    return Obs.joinLines ? Obs.joinLines(lines) : uPlot.join(lines.map((t) => [t.x, t.y])); // (livedraw.js)
  }

  // A figure's shape: what uPlot's options depend on. The same shape keeps the instance.
  const shapeKey = (lines, layout) => [
    lines.map((t) => [t.yaxis || "y", t.name, t.line && t.line.color, t.line && t.line.width, t.line && t.line.dash,
                      t.opacity, t.fill].join()).join("|"),
    layout.xaxis && layout.xaxis.type, layout.yaxis && layout.yaxis.type, layout.yaxis3 ? "y3" : "",
    JSON.stringify(layout.margin), layout.dragmode, document.documentElement.dataset.theme || ""].join("#");

  function options(node, fig, lines, layout, on) {
    const t = theme(), m = layout.margin || {l: 50, r: 12, t: 10, b: 30};
    const time = layout.xaxis && layout.xaxis.type === "date";
    const axis = (scale, side, size) => ({
      scale, side, size, stroke: t.muted, font: FONT, labelFont: FONT, gap: 4,
      grid: {show: side !== 1, stroke: t.grid, width: 1}, ticks: {show: true, stroke: t.grid, width: 1, size: 4},
      values: scale === "x" && time ? undefined
        : (u, vals, i) => (fig.ticks[scale] = fig.log[scale] ? logLabels(u, vals, i) : tickLabels(vals)),
      ...(fig.log[scale] && {splits: (u, i, lo, hi) => logSplits(lo, hi), filter: (u, v) => v})});
    const series = [{}], bands = [];
    lines.forEach((tr, i) => {
      const ln = tr.line || {}, width = ln.width === undefined ? 1.5 : ln.width;
      series.push({label: tr.name || "", scale: tr.yaxis === "y3" ? "y3" : "y", spanGaps: true,
                   stroke: width > 0 ? ln.color || t.fg : "transparent", width, alpha: tr.opacity ?? 1,
                   dash: DASH[ln.dash] || undefined, points: {show: false}});
      if (tr.fill === "tonexty" && i > 0) bands.push({series: [i + 1, i], fill: tr.fillcolor || "rgba(0,0,0,0.1)"});
    });
    // A span within rounding error of its values is a flat line (uPlot would step its ticks 1e-16 apart forever)
    const flat = (lo, hi) => !(hi - lo > Math.max(Math.abs(lo), Math.abs(hi)) * 1e-9);
    const rng = (key) => (u, lo, hi) => {
      const r = fig.ranges[key], log = fig.log[key];
      if (r) [lo, hi] = r;
      // a log x from its first x > 0: step 0 is off the axis (not at 1e-9, ten empty decades away)
      if (log && key === "x" && !(lo > 0)) lo = u.data[0].find((v) => v > 0);
      const thin = flat(lo, hi);
      if ((r || key === "x") && !thin) return [lo, hi];
      if (!(hi >= lo)) return [0, 1];
      // y (and a single x): what is visible (uPlot's min and max over the x range drawn) with 6% room, a flat line
      // not drawn at 0
      const a = Math.log10(lo), b = Math.log10(hi), p = thin ? 0.3 : (b - a) * 0.06;
      if (log && lo > 0) return [round1(10 ** (a - p), Math.floor), round1(10 ** (b + p), Math.ceil)];
      const q = thin ? Math.abs(hi) * 0.5 || 1 : (hi - lo) * 0.06;
      return [lo - q, hi + q];
    };
    const scale = (k) => ({range: rng(k), distr: fig.log[k] ? 3 : 1});
    const scales = {x: {time, ...scale("x")}, y: scale("y"), ...(layout.yaxis3 && {y3: scale("y3")})};
    const xa = layout.xaxis || {}, tk = xa.tickvals ? {splits: () => fig.x.tickvals, values: () => fig.x.ticktext} : {};
    const axes = [{...axis("x", 2, m.b), ...tk, label: xa.title ? xa.title.text : "",
                   labelSize: 14}, axis("y", 3, fitLabels(m.l))];
    if (layout.yaxis3) axes.push({...axis("y3", 1, fitLabels(m.r)), labelSize: 14,
                                  label: (layout.yaxis3.title || {}).text || "",
                                  ...(layout.yaxis3.tickformat && {
                                    values: (u, v) => v.map((x) => +(x * 100).toPrecision(3) + "%")})});
    const drag = layout.dragmode !== false; // none (touch): no mousedown for uPlot, nor a tap read as a drag's end
    const tell = (what, detail, c) => node.dispatchEvent(new CustomEvent("obs-plot-" + what, {detail, cancelable: c}));
    return {
      width: fig.width, height: fig.height, ms: 1, legend: {show: false}, series, axes, scales, bands,
      // UTC dates (as the axis title and hover say) of whole ms: uPlot's rounding put ticks 1 ms before the minute
      tzDate: (ms) => uPlot.tzDate(new Date(Math.floor(ms)), "Etc/UTC"),
      padding: [m.t, layout.yaxis3 ? 0 : (u) => Math.max(m.r, halfLast(fig.ticks.x)), 0, 0],
      cursor: {y: false, points: {show: false}, drag: {x: drag, y: false, setScale: false, ...(!drag && {click() {}})},
               bind: {dblclick: () => () => { if (on.reset) on.reset(); return null; },
                      ...(drag ? {} : {mousedown: () => () => null})}},
      hooks: {
        draw: [(u) => { Obs.drawPointMarks(u, fig); Obs.placeMarks(u, fig); drawn(u, fig); }], // (plotmarks.js)
        setSelect: [(u) => {
          const s = u.select;
          if (s.width < 3) return;
          const a = u.posToVal(s.left, "x"), b = u.posToVal(s.left + s.width, "x");
          u.setSelect({left: 0, width: 0, top: 0, height: 0}, false);
          // offered to the page first (annotations.js takes a shift-drag for a note over the range), else a zoom
          if (tell("select", {x0: a, x1: b}, true) && on.zoom) on.zoom(a, b);
        }],
        setCursor: [(u) => hover(u, fig)],
        ready: [(u) => u.over.addEventListener("click", (ev) => {
          if (u.select.width <= 2) tell("click", {x: u.posToVal(ev.offsetX, "x")});
        })],
      },
    };
  }

  // What is drawn, written back into the figure's layout (as Plotly's did): the axes' ranges and tick labels.
  function drawn(u, fig) {
    for (const k of ["x", "y"]) {
      const s = u.scales[k], a = fig.layout[k + "axis"], f = fig.log[k] ? Math.log10 : (v) => v;
      if (a && s.min !== undefined && s.min !== null) a.range = [f(s.min), f(s.max)];
    }
    if (fig.layout.yaxis) fig.layout.yaxis.ticklabels = fig.ticks.y;
    if (fig.layout.yaxis3) fig.layout.yaxis3.ticklabels = fig.ticks.y3;
  }

  // Hover: every line's value at the pointer's x
  function hover(u, fig) {
    const i = u.cursor.idx;
    if (!fig.layout.hovermode) return;
    if (i === null || i === undefined || u.cursor.left < 0) { if (!fig.labelTip) Obs.hideMarkTip(fig); return; }
    const xv = u.data[0][i], rows = [fig.fmtX(xv)];
    fig.lines.forEach((tr, k) => {
      const v = u.data[k + 1][i];
      if (v !== null && v !== undefined && tr.hoverinfo !== "skip") rows.push(`${tr.name}: ${fig.fmtY(v, tr)}`);
    });
    const tip = fig.tip, w = u.over.clientWidth;
    tip.textContent = rows.join("\n"); tip.hidden = false;
    const x = u.over.offsetLeft + u.cursor.left;
    tip.style.left = (u.cursor.left > w / 2 ? x - tip.offsetWidth - 12 : x + 12) + "px";
    tip.style.top = (u.over.offsetTop + 4) + "px";
  }

  function toolbar(node, on) {
    const bar = make("div", {className: "modebar"});
    for (const t of on.toolbar || []) {
      const b = bar.appendChild(make("button", {type: "button", className: "modebar-btn", textContent: t.text,
                                                title: t.label}));
      b.setAttribute("aria-label", t.label);
      b.addEventListener("click", () => t.fn(node));
    }
    return bar;
  }

  function legend(fig, layout, lines) {
    const el = fig.legend, show = layout.showlegend ? lines.filter((t) => t.showlegend !== false && t.name) : [];
    const key = show.map((t) => t.name + "\u0000" + (t.line || {}).color).join("|");
    if (el.hidden !== !show.length) el.hidden = !show.length; // (rewritten, it restyles: a forced recalc a chart)
    if (el.dataset.key === key) return;
    el.dataset.key = key;
    el.replaceChildren(...show.map((t) => {
      const item = make("span", {className: "legend-item"}), sw = make("i");
      sw.style.borderColor = (t.line || {}).color || "";
      if ((t.line || {}).dash === "dot") sw.style.borderStyle = "dotted";
      item.append(sw, document.createTextNode(t.name));
      return item;
    }));
  }

  // The axes' ranges a layout fixes (autorange: false; log axes: from log10 units), null where the axis fits its data
  function ranges(fig, layout) {
    const fixed = (a, key) => { // (a range drawn, written back: not fixed)
      if (!a || !a.range || a.autorange !== false) return null;
      return fig.log[key] ? [10 ** a.range[0], 10 ** a.range[1]] : a.range.slice();
    };
    return {x: fixed(layout.xaxis, "x"), y: fixed(layout.yaxis, "y"), y3: fixed(layout.yaxis3, "y3")};
  }

  // The figure drawn again with its lines' points changed in place (node.data's line traces: new x / y arrays,
  // typed-array views included) and its layout's axis ranges: the canvas only (uPlot's setData), nothing else
  // rebuilt. False when there is no such figure, or its log y axis has its first value > 0 (then drawFigure).
  Obs.redrawData = (node) => {
    const fig = node._figure;
    if (!fig || !fig.u || !fig.lines.length || logOf(fig.layout, fig.lines, "y") !== fig.log.y) return false;
    fig.ranges = ranges(fig, fig.layout);
    fig.u.setData(columns(fig.lines), true);
    return true;
  };

  // size: [width, height] (CSS px) when the caller has read it (charts.js: every chart's in one layout), else read
  Obs.drawFigure = (node, traces, layout, on = {}, size = null) => {
    const lines = traces.filter(isLine), markers = traces.filter((t) => t.mode === "markers" && t.x && t.x.length);
    node.data = traces; node.layout = layout;
    let fig = node._figure;
    const width = (size ? size[0] : node.clientWidth) || 600, height = (size ? size[1] : node.clientHeight) || 260;
    if (!fig) {
      fig = node._figure = {node, ranges: {}, log: {}, ticks: {}};
      node.classList.add("figure");
      fig.legend = make("div", {className: "legend"});
      fig.labels = make("div", {className: "mark-labels"});
      fig.tip = make("div", {className: "chart-hover", hidden: true});
      node.replaceChildren(fig.legend, fig.labels, toolbar(node, on), fig.tip);
      if (on.toolbar && Obs.toolbarA11y) Obs.toolbarA11y(node, on.toolbarLabel || "Chart tools");
      node.addEventListener("mouseleave", () => Obs.hideMarkTip(fig));
    }
    fig.on = on; fig.layout = layout; fig.lines = lines; fig.markers = markers; fig.width = width; fig.height = height;
    const time = layout.xaxis && layout.xaxis.type === "date";
    fig.log = {x: logOf(layout, lines, "x"), y: logOf(layout, lines, "y"), y3: logOf(layout, lines, "y3")};
    fig.fmtX = time ? (v) => new Date(v).toISOString().slice(0, 19).replace("T", " ") + " UTC"
      : (v) => Number(v).toLocaleString("en-US");
    fig.fmtY = (v, tr) => (tr.unit === "fraction" ? +(v * 100).toPrecision(3) + "%"
      : num(v) + (tr.unit ? " " + tr.unit : ""));
    const key = shapeKey(lines, layout) + fig.log.x + fig.log.y + fig.log.y3 + !(fig.x = layout.xaxis || {}).tickvals;
    const data = lines.length ? columns(lines) : [[]];
    legend(fig, layout, lines);
    fig.ranges = ranges(fig, layout);
    if (!fig.u || fig.key !== key) {
      if (fig.u) fig.u.destroy();
      fig.key = key;
      fig.u = new uPlot(options(node, fig, lines, layout, on), data,
                        (u, init) => { node.insertBefore(u.root, fig.labels); init(); });
    } else {
      fig.u.batch(() => {
        if (fig.u.width !== width || fig.u.height !== height) fig.u.setSize({width, height});
        fig.u.setData(data, true);
      });
    }
    return fig.u;
  };

  // The x pixel (from the plot area's left) of x, as drawn; the plot area's box in the node (CSS px)
  const uOf = (node) => node._figure && node._figure.u;
  Obs.figureX = (node, x) => uOf(node) ? uOf(node).valToPos(x, "x") : null;
  Obs.figureBox = (node, o = uOf(node) && uOf(node).over) =>
    o ? {left: o.offsetLeft, top: o.offsetTop, width: o.clientWidth, height: o.clientHeight} : null;
  Obs.figureXAt = (node, px) => uOf(node) ? uOf(node).posToVal(px, "x") : NaN;
  Obs.savePNG = (node, u = uOf(node)) => { // the chart with its marks as a PNG file (named after the chart's element)
    if (!u) return;
    const c = make("canvas", {width: u.ctx.canvas.width, height: u.ctx.canvas.height}).getContext("2d");
    Obs.drawMarks(c, u, node._figure, true); c.drawImage(u.ctx.canvas, 0, 0); Obs.drawMarks(c, u, node._figure, false);
    make("a", {href: c.canvas.toDataURL("image/png"), download: (node.id || "chart") + ".png"}).click();
  };
  // The figure's marks placed again for its layout's shapes and labels, the canvas untouched (chartlive.js)
  Obs.redrawMarks = (node) => { if (uOf(node)) Obs.placeMarks(uOf(node), node._figure); };
  Obs.figurePurge = (node) => { if (uOf(node)) uOf(node).destroy(); node._figure = null; };
})(window.Obs);
