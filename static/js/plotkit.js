// What every chart shares: theme colours, a keyboard-friendly tool bar (one tab stop, arrow keys inside), number
// formatting, the data-table alternative to a chart, and the overlay registry feature modules draw through
// (Obs.setOverlays).
"use strict";

window.Obs = window.Obs || {};

(function (Obs) {
  // Colours from the stylesheet's custom properties, so light and dark mode need no second palette here. Read once
  // a theme (theme.js's "obs-theme" event): a read forces the page's pending style, a second style pass a frame.
  let theme = null;
  document.addEventListener("obs-theme", () => { theme = null; });
  Obs.theme = () => {
    if (theme) return theme;
    const css = getComputedStyle(document.documentElement);
    const v = (name, dflt) => (css.getPropertyValue(name) || "").trim() || dflt;
    theme = Object.freeze({fg: v("--fg", "#1d232b"), muted: v("--muted", "#5b6470"), grid: v("--grid", "#e6e9ee"),
                           card: v("--card", "#fff"), red: v("--red", "#c62828"), amber: v("--amber", "#8a5300"),
                           missing: v("--missing", "#b0b6be")});
    return theme;
  };

  // How many rows a line chart's legend of these names takes in a figure `width` wide: plot.css's wrapping row of
  // items (a 16 + 4 px swatch and the name at 10 px, .8rem apart) between left: 48px and right: 84px (plot.js's tool
  // bar), the names measured on a canvas (no layout read)
  const measure = document.createElement("canvas").getContext("2d");
  Obs.legendRows = (names, width) => {
    measure.font = "10px system-ui, sans-serif";
    let rows = names.length ? 1 : 0, x = 0;
    for (const name of names) {
      const w = 21 + Math.ceil(measure.measureText(name).width), room = Math.max(80, width - 132);
      if (x && x + 12.8 + w > room) { rows++; x = w; } else x += (x ? 12.8 : 0) + w;
    }
    return rows;
  };

  // A touch screen's (no drag-zoom there): the query made once and its answer kept (a matchMedia() a chart's redraw
  // was most of a zoom's layout time in bench/dashboard.py --profile)
  const coarse = window.matchMedia ? window.matchMedia("(pointer: coarse)") : null;
  let isCoarse = !!(coarse && coarse.matches);
  if (coarse && coarse.addEventListener) coarse.addEventListener("change", (e) => { isCoarse = e.matches; });
  Obs.coarsePointer = () => isCoarse;

  // A chart's tool that downloads it as a PNG image (plot.js savePNG): the dashboard's, the front page's, the panel's.
  Obs.PNG_TOOL = {text: "⇩", label: "Download the chart as a PNG image", fn: (node) => Obs.savePNG(node)};

  // A chart's tool bar (plot.js's, the heatmap's Plotly mode bar) as one ARIA toolbar: a single tab stop (the last
  // button used), arrows move inside it.
  Obs.toolbarA11y = (plotEl, label) => {
    const bar = plotEl.querySelector(".modebar");
    if (!bar) return;
    Obs.putAttr(bar, "role", "toolbar"); // (called on every redraw of the marks: written only where changed)
    Obs.putAttr(bar, "aria-label", label);
    const btns = bar.querySelectorAll(".modebar-btn");
    const cur = Math.min(plotEl._obsToolIndex || 0, btns.length - 1);
    // (the attribute, compared: a button's tabIndex reads 0 without one)
    btns.forEach((b, i) => Obs.putAttr(b, "tabindex", i === cur ? 0 : -1));
    if (plotEl._obsToolbarKeys) return;
    plotEl._obsToolbarKeys = true;
    plotEl.addEventListener("keydown", (ev) => {
      const all = [...plotEl.querySelectorAll(".modebar-btn")];
      const i = all.indexOf(ev.target);
      if (i < 0) return;
      const next = {ArrowRight: i + 1, ArrowDown: i + 1, ArrowLeft: i - 1, ArrowUp: i - 1, Home: 0,
                    End: all.length - 1}[ev.key];
      if (next === undefined) return;
      ev.preventDefault();
      const j = (next + all.length) % all.length;
      plotEl._obsToolIndex = j;
      all.forEach((b, k) => { b.tabIndex = k === j ? 0 : -1; });
      all[j].focus();
    });
  };

  // A <select> whose change acts (switches a view): a mouse pick or a typed choice acts at once, but arrow keys
  // only move the selection — Enter, or leaving the field, then applies it. fn(value).
  Obs.onCommit = (select, fn) => {
    let arrows = false, committed = select.value;
    const commit = () => {
      arrows = false;
      if (select.value !== committed) { committed = select.value; fn(select.value); }
    };
    select.addEventListener("keydown", (ev) => {
      if (/^(Arrow|Page|Home$|End$)/.test(ev.key)) arrows = true;
      else if (ev.key === "Enter") { ev.preventDefault(); commit(); }
    });
    select.addEventListener("pointerdown", () => { arrows = false; });
    select.addEventListener("change", () => { if (!arrows) commit(); });
    select.addEventListener("blur", commit);
    return {set: (v) => { select.value = v; committed = select.value; }};
  };

  // el("li", {class, text, "data-x": .., attrs: {..}, on: {click: fn}, anyProperty: ..}, ...children): a DOM node,
  // its text always as text, never markup; null / undefined props and children are left out.
  Obs.el = (tag, props, ...kids) => {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (v === undefined) continue;
      if (k === "class") e.className = v; else if (k === "text") e.textContent = v;
      else if (k === "attrs") for (const [a, x] of Object.entries(v)) e.setAttribute(a, x);
      else if (k === "on") for (const [a, f] of Object.entries(v)) e.addEventListener(a, f);
      else if (k.startsWith("data-")) e.setAttribute(k, v); else e[k] = v;
    }
    for (const c of kids) if (c !== null && c !== undefined && c !== false) e.append(c);
    return e;
  };

  Obs.fmt = (v) => {
    if (v === null || v === undefined) return "–";
    if (typeof v !== "number") return String(v);
    const a = Math.abs(v);
    if (a !== 0 && (a >= 1e6 || a < 1e-3)) return v.toExponential(3);
    return (+v.toPrecision(5)).toLocaleString("en-US", {maximumFractionDigits: 6});
  };
  Obs.count = (n) => n === undefined || n === null || !Number.isFinite(+n) ? "–"
    : n >= 1e12 ? (n / 1e12).toFixed(2) + "T"
    : n >= 1e9 ? (n / 1e9).toFixed(2) + "B" : n >= 1e6 ? (n / 1e6).toFixed(2) + "M"
    : n >= 1e3 ? (n / 1e3).toFixed(1) + "k" : String(Math.round(n));
  // Writes that leave the DOM alone when nothing changed: each real write costs style, layout and paint (a live
  // update's main cost). A lone text node's data is rewritten in place: no new node to style anew (and collect).
  const setText = (el, text) => {
    const t = el.firstChild;
    if (t && t === el.lastChild && t.nodeType === Node.TEXT_NODE) t.data = text; else el.textContent = text;
  };
  Obs.put = (el, text) => { text = String(text); if (el.textContent !== text) setText(el, text); };
  // A live figure (the header's step, every update) in a box of its own measured size (.obs-figure: contain:
  // strict): a new value of the same shape (the same text but for its digits: tabular figures, the same width) is
  // laid out inside that box alone, not the whole page (half the page's layout time in a live view). A new shape
  // unboxes it; it is measured when a value of the same shape follows (a layout then, once a shape: never at the
  // page's load, where it would join the first paint's work).
  const shape = (text) => text.replace(/[0-9]/g, "0");
  const unbox = (el) => {
    el.classList.remove("obs-figure");
    el.style.width = el.style.height = el.style.lineHeight = "";
  };
  Obs.putFigure = (el, text) => {
    text = String(text);
    const was = el.textContent, boxed = el.classList.contains("obs-figure");
    if (was === text) return;
    const same = shape(was) === shape(text);
    if (!same && boxed) unbox(el);
    setText(el, text);
    if (!same || boxed) return;
    const box = el.getBoundingClientRect();
    if (!box.width) return; // (not laid out: hidden)
    const w = Math.ceil(box.width) + "px", h = Math.ceil(box.height) + "px"; // (whole pixels: no glyph cut)
    el.style.width = w; el.style.height = el.style.lineHeight = h; // (its one line fills the box: same baseline)
    el.classList.add("obs-figure");
  };
  window.addEventListener("resize", () => { // (a breakpoint's font size: measured again at the next value)
    document.querySelectorAll(".obs-figure").forEach(unbox);
  });
  Obs.putAttr = (el, name, value) => {
    value = String(value);
    if (el.getAttribute(name) !== value) el.setAttribute(name, value);
  };
  Obs.putClass = (el, cls) => { if (el.className !== cls) el.className = cls; };
  Obs.putHidden = (el, hidden) => { if (el.hidden !== !!hidden) el.hidden = !!hidden; };
  // A transient notice, gone 8 s after it was last written. With a `key`, the notice under that key is rewritten in
  // place and its time starts again: a stream of news (an anomaly storm) is one notice, not a stack of them.
  const keyed = new Map(); // key -> the notice on screen
  Obs.toast = (text, level, key) => {
    const box = document.getElementById("toasts") ||
      document.body.appendChild(Obs.el("div", {id: "toasts", attrs: {role: "status", "aria-live": "polite"}}));
    let t = key !== undefined ? keyed.get(key) : null;
    if (!t || !t.isConnected) {
      t = box.appendChild(Obs.el("div"));
      if (key !== undefined) keyed.set(key, t);
    }
    clearTimeout(t.obsTimer);
    Obs.putClass(t, "toast toast-" + (level || "info"));
    Obs.put(t, text); // (its text node rewritten in place: no new node to style and lay out)
    t.obsTimer = setTimeout(() => { t.remove(); if (keyed.get(key) === t) keyed.delete(key); }, 8000);
    return t;
  };
  // Draw only what is seen: fn(seen) whenever `el` comes within 100 px of the viewport or leaves it; returns what to
  // start from (true where the browser has no IntersectionObserver: everything is then seen). Charts and panels
  // skip their drawing while unseen and catch up in fn.
  const SEEN_PX = 100; // (the observer's margin: "seen" from this far off screen)
  Obs.watchSeen = (el, fn) => {
    if (!window.IntersectionObserver) return true;
    new IntersectionObserver((entries) => fn(entries[entries.length - 1].isIntersecting), {rootMargin: SEEN_PX + "px"})
      .observe(el);
    return false;
  };
  // Whether each of `els` is seen now, as watchSeen's observer will say (its first answer comes a frame later):
  // every box read in one layout, so call it before writing to the DOM
  Obs.seenNow = (els) => els.map((el) => el.getBoundingClientRect()).map((r) => r.bottom >= -SEEN_PX &&
    r.right >= -SEEN_PX && r.top <= innerHeight + SEEN_PX && r.left <= innerWidth + SEEN_PX && r.width + r.height > 0);
  // A moment as every page shows one, like the charts' wall-time axis: UTC, labelled ("2023-11-14 22:13:20 UTC")
  Obs.utc = (t) => (t ? new Date(t).toISOString().slice(0, 19).replace("T", " ") + " UTC" : "–");
  Obs.duration = (s) => {
    if (s === null || s === undefined || !Number.isFinite(+s)) return "–";
    s = Math.max(0, Math.round(s));
    const d = Math.floor(s / 86400), h = Math.floor(s / 3600) % 24, m = Math.floor(s / 60) % 60;
    return d ? `${d} d ${h} h` : h ? `${h} h ${m} min` : m ? `${m} min ${s % 60} s` : `${s} s`;
  };

  // A run's progress as every page writes it (webapp/runs/pagedata.py percent: the same rule): one decimal below
  // 10% ("0.3%"), whole percents from there, rounded down (no "100%" before the end)
  Obs.percent = (frac) => {
    const tenths = Math.floor(frac * 1000 + 1e-9);
    return (tenths < 100 ? (tenths / 10).toFixed(1).replace(/\.0$/, "") : String(Math.floor(tenths / 10))) + "%";
  };

  // The "time left" of a run (header and run list): the latest heartbeat's estimate while it trains and its trainer
  // is heard from (a lost or ended trainer's estimate is stale: none); once ended, how it ended ("finished" only
  // when it trained its whole token budget, else "stopped").
  Obs.timeLeft = (run, frac, eta) => {
    if (run.state === "failed") return "failed";
    if (run.state === "stopped") return frac !== null && frac >= 0.999 ? "finished" : "stopped";
    if (!Obs.heard(run) || run.state !== "training" || eta === null) return "–";
    return "≈ " + Obs.duration(eta);
  };
  // Whether the run's trainer is still heard from (its rate and estimate mean something).
  Obs.heard = (run) => run.health !== "lost" && run.health !== "ended" && run.state !== "stopped" &&
    run.state !== "failed";

  // One column of the data table: a series' points (finite ones, then the non-finite kinds), only those with
  // lo <= step <= hi when lo is given.
  Obs.tableColumn = (d, label, lo, hi) => {
    const steps = d.steps.concat(d.nfSteps), keep = (_, i) => lo === undefined || (steps[i] >= lo && steps[i] <= hi);
    return {label, steps: steps.filter(keep), values: d.values.concat(d.nfKinds).filter(keep)};
  };

  // The data-table alternative: rows = steps (ascending), one column per series; at most `max` rows, evenly
  // thinned, with a caption that says so.
  Obs.renderTable = (box, caption, columns, max) => {
    const rows = new Map();
    columns.forEach((c, j) => c.steps.forEach((s, i) => {
      let r = rows.get(s);
      if (!r) { r = new Array(columns.length).fill(""); rows.set(s, r); }
      r[j] = c.text ? c.text[i] : Obs.fmt(c.values[i]);
    }));
    let steps = [...rows.keys()].sort((a, b) => a - b);
    const total = steps.length;
    if (steps.length > max) {
      const every = Math.ceil(steps.length / max);
      steps = steps.filter((_, i) => i % every === 0);
    }
    const th = (scope, text) => Obs.el("th", {scope, text});
    const said = total > steps.length ? ` — every ${Math.ceil(total / max)}th of ${total} points shown; zoom in ` +
      "for all of them" : ` — ${total} points`;
    const table = Obs.el("table", {class: "data-table"}, Obs.el("caption", {text: caption + said}),
      Obs.el("thead", {}, Obs.el("tr", {}, ...["step", ...columns.map((c) => c.label)].map((n) => th("col", n)))),
      Obs.el("tbody", {}, ...steps.map((s) => Obs.el("tr", {}, th("row", s),
                                                         ...rows.get(s).map((text) => Obs.el("td", {text}))))));
    box.replaceChildren(table);
  };

  // ------------------------------------------------------------------------------------------ overlays
  // Feature modules publish marks on the charts without touching chart code:
  //   Obs.setOverlays(source, [{id, x0, x1?, metric?, label?, hover?, collapse?, color?, textColor?, onClick?}]);
  //   then ctx.schedule(). `hover`: the full text (or lines) shown over the label; `collapse`: close labels of
  //   such marks fold into one with a count at the chart's current zoom (Obs.labelGroups), every text in its hover.
  // x0/x1 are steps (charts convert them when the x axis shows tokens or time); `metric` limits a mark to the
  // charts that draw that series; x1 absent or equal to x0 draws a line.
  const overlaySources = new Map();
  const overlayKeys = new Map(); // source -> Map(metric, or "" for every chart -> its marks as JSON)
  const charts = new Set();
  const keysByMetric = (list) => { // (functions drop out: same marks, same key)
    const by = new Map();
    list.forEach((o) => { const m = o.metric || ""; if (!by.has(m)) by.set(m, []); by.get(m).push(o); });
    return new Map([...by].map(([m, l]) => [m, JSON.stringify(l)]));
  };
  // `list`: an array of marks, or a Map whose values are the marks (held, not copied: the source calls again after
  // each change). `changed` (optional): the metrics whose marks changed since the source's last call ("" for marks
  // on every chart), from a source that knows (anomalies.js keeps thousands of marks in a detector storm); else the
  // lists are compared, metric by metric.
  Obs.setOverlays = (source, list, changed) => {
    list = list || [];
    overlaySources.set(source, list); // (fresh onClick closures either way)
    if (changed) {
      overlayKeys.delete(source);
    } else {
      const keys = keysByMetric(list), old = overlayKeys.get(source) || new Map();
      overlayKeys.set(source, keys);
      changed = new Set([...keys.keys(), ...old.keys()].filter((m) => keys.get(m) !== old.get(m)));
    }
    if (!changed.size) return; // the same marks: nothing to redraw (a first empty list changes nothing either)
    charts.forEach((ch) => { // only the charts whose marks changed, and only their marks (their lines stay)
      if (changed.has("") || (ch.items || []).some((it) => changed.has(it.name))) { ch.remark = true; ch.dirty = true; }
    });
  };
  Obs.overlaysFor = (chart) => {
    const names = new Set((chart.items || []).map((it) => it.name));
    const out = [];
    overlaySources.forEach((list) => list.forEach((o) => { if (!o.metric || names.has(o.metric)) out.push(o); }));
    return out;
  };
  Obs.overlayClicked = (id) => {
    overlaySources.forEach((list) => list.forEach((o) => { if (o.id === id && o.onClick) o.onClick(o); }));
  };
  // Extra traces, drawn after a chart's own (whose order is kept): Obs.setTraces(source, (chart) => [trace, ...]
  // or null); then ctx.schedule(). forecast.js draws a forecast band and reference runs this way.
  const traceSources = new Map();
  Obs.setTraces = (source, fn) => {
    traceSources.set(source, fn);
    charts.forEach((ch) => { ch.full = true; ch.dirty = true; });
  };
  Obs.tracesFor = (chart) => {
    const out = [];
    traceSources.forEach((fn) => {
      try { out.push(...(fn(chart) || [])); } catch (e) { console.error("traces:", e); }
    });
    return out;
  };
  Obs.registerChart = (chart) => charts.add(chart);
  Obs.unregisterChart = (chart) => charts.delete(chart);

  // A piece of the page rendered by the server (webapp/fragments.py) in place of `node`'s contents. The browser asks
  // again with the piece's ETag (304 while nothing changed); an unchanged piece leaves the page alone. Resolves to
  // whether the contents changed; throws on an HTTP error.
  Obs.refreshFragment = async (node, url) => {
    const ask = (node.fragmentAsk = (node.fragmentAsk || 0) + 1); // only the latest ask's answer is put in place
    const r = await fetch(url, {credentials: "same-origin"});
    if (!r.ok) throw new Error("HTTP " + r.status);
    const tag = r.headers.get("ETag"), html = await r.text();
    if (ask !== node.fragmentAsk || (tag && tag === node.dataset.etag)) return false;
    node.innerHTML = html;
    if (tag) node.dataset.etag = tag;
    return true;
  };
})(window.Obs);
