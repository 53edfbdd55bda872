// Anomalies on the run dashboard: the run's log from the API, then live "anomaly" frames. Each warning/critical one
// is a mark on its metric's chart (a band once closed, Obs.setOverlays), a new one also a toast; a panel lists the
// latest, linking to the full log, whose "chart" links open the dashboard zoomed on it (?from=S&to=E).
"use strict";

(function (Obs) {
  const SOURCE = "anomalies";
  const PANEL_ROWS = 12;
  const COLORS = {critical: {band: "rgba(229,57,53,0.16)", line: "#e53935", text: "var(--mark-critical, #b71c1c)"},
                  warning: {band: "rgba(249,168,37,0.20)", line: "#f9a825", text: "var(--mark-warning, #8d5a00)"}};
  const byKey = new Map(); // key -> record (superseded ones are dropped)
  let page = null, ctx = null, logUrl = "";
  // Kept as records come, not made again from all of them on each frame: a detector storm brings ~10 frames a second
  // and thousands of records, and remaking them all was most of the page's garbage (bench/liveview.py).
  const marks = new Map(); // "metric@step" -> the mark there (Obs.setOverlays reads this Map's values)
  const keysAt = new Map(); // "metric@step" -> Set of the keys of the records marked there
  const atOf = new Map(); // record key -> its "metric@step" (only drawn records: warning, critical)
  const unmarked = new Set(); // keys of records changed, added or dropped since the marks were last made
  const unlisted = new Set(); // ... since the panel was last written
  let open = 0; // records ongoing
  let top = []; // the panel's records, newest first (PANEL_ROWS at most)
  const rows = new Map(); // record key -> {li, sig}: the panel's rows, rebuilt only when their record changed

  const label = (a) => a.kind.replace(/_/g, " ");
  const hover = (a) => `step ${a.start_step} · ${a.severity}: ${label(a)}` +
    (a.explanation ? " — " + a.explanation : "");
  const newer = (a, b) => b.start_step - a.start_step || b.id - a.id; // < 0: a is listed before b

  // The line chart showing a metric: the default charts' own and optional series, or a per-domain series under
  // a chart's prefix; anything else (router loads, step time, the heartbeat) is marked on the loss chart.
  function chartMetric(metric) {
    const charts = page.charts || [];
    if (charts.some((spec) => Obs.chartDraws(spec, metric))) return metric; // (charts.js)
    return charts.length ? charts[0].metrics[0] : undefined;
  }

  // One mark per chart and step: episodes starting together share it (their labels joined, every one in its hover).
  function markOf(keys) {
    let mark = null;
    for (const key of keys) {
      const a = byKey.get(key), c = COLORS[a.severity];
      const closed = a.end_step !== null && a.end_step > a.start_step;
      if (!mark) {
        mark = {id: "anomaly-" + a.id, x0: a.start_step, x1: closed ? a.end_step : undefined,
                metric: chartMetric(a.metric),
                label: "⚠ " + label(a), hover: [hover(a)], color: closed ? c.band : c.line, textColor: c.text,
                collapse: true, onClick: () => { location.href = logUrl + "#a-" + a.id; }};
        continue;
      }
      if (!mark.label.includes(label(a))) mark.label += ", " + label(a);
      mark.hover.push(hover(a));
      if (a.severity === "critical") Object.assign(mark, {color: closed ? c.band : c.line, textColor: c.text});
      if (closed && (mark.x1 === undefined || a.end_step > mark.x1)) mark.x1 = a.end_step;
    }
    return mark;
  }

  // The marks of the records in `unmarked` made again; returns the metrics whose marks changed.
  function remark() {
    const dirty = new Set();
    for (const key of unmarked) {
      const a = byKey.get(key), was = atOf.get(key);
      const at = a && COLORS[a.severity] ? chartMetric(a.metric) + "@" + a.start_step : undefined; // (info: not drawn)
      if (was !== undefined) dirty.add(was);
      if (at === undefined) { atOf.delete(key); } else { atOf.set(key, at); dirty.add(at); }
      if (was !== undefined && was !== at) {
        const keys = keysAt.get(was);
        keys.delete(key);
        if (!keys.size) keysAt.delete(was);
      }
      if (at !== undefined) { if (!keysAt.has(at)) keysAt.set(at, new Set()); keysAt.get(at).add(key); }
    }
    const changed = new Set();
    for (const at of dirty) {
      const keys = keysAt.get(at);
      if (keys) marks.set(at, markOf(keys)); else marks.delete(at);
      changed.add(at.slice(0, at.lastIndexOf("@")));
    }
    unmarked.clear();
    return changed;
  }

  // ------------------------------------------------------------------------------------------ panel
  function panel() {
    let box = document.getElementById("anomaly-panel");
    if (box) return box;
    const el = Obs.el;
    box = el("section", {id: "anomaly-panel", class: "panel anomalies"},
             el("h2", {}, "Anomalies ", el("span", {class: "muted count"}), el("a", {class: "more", href: logUrl,
                                                                                    text: "full log →"})),
             el("ol", {class: "anomaly-list"}), el("p", {class: "empty", hidden: true, text: "None so far."}));
    const anchor = document.querySelector("section.events") || document.getElementById("charts");
    anchor.parentNode.insertBefore(box, anchor);
    return box;
  }

  // The panel's records, newest first: found again among all only when a changed record is listed or would be.
  function listed() {
    const last = top[top.length - 1];
    const moved = [...unlisted].some((key) => top.some((a) => a.key === key) ||
      (byKey.has(key) && (top.length < PANEL_ROWS || newer(byKey.get(key), last) < 0)));
    if (!moved) return top;
    const out = [];
    for (const a of byKey.values()) {
      if (out.length === PANEL_ROWS && newer(a, out[PANEL_ROWS - 1]) >= 0) continue;
      let i = out.length;
      while (i > 0 && newer(a, out[i - 1]) < 0) i--;
      out.splice(i, 0, a);
      if (out.length > PANEL_ROWS) out.pop();
    }
    return out;
  }

  function row(a) {
    const sig = [a.id, a.severity, a.kind, a.metric, a.start_step, a.end_step, a.explanation, a.zoom.from, a.zoom.to]
      .join("\u0000");
    const had = rows.get(a.key);
    if (had && had.sig === sig) return had.li;
    const el = Obs.el, li = el("li", {class: "sev-" + a.severity, "data-key": a.key},
      el("span", {class: "badge sev-" + a.severity, text: a.severity}), " ",
      el("a", {href: logUrl + "#a-" + a.id, text: `${label(a)}${a.metric ? " · " + a.metric : ""}`}), " ",
      el("button", {type: "button", class: "link steps", title: "zoom the charts on it",
                    on: {click: () => zoom(a.zoom.from, a.zoom.to)},
                    text: "step " + a.start_step + (a.end_step === null ? " (ongoing)" : "–" + a.end_step)}),
      el("div", {class: "muted why", text: a.explanation}));
    rows.set(a.key, {li, sig});
    return li;
  }

  // Anomaly frames come in bursts (a divergence trips many detectors; frames between steps): the charts' marks are
  // made again at most once an animation frame, from all that came, before the charts draw in it (a hidden tab: on
  // its return); the panel's list, for people to read, at most once a second and only while it is on screen (rows
  // rewritten ten times a second in a storm were most of Blink's garbage).
  const PANEL_EVERY_MS = 1000;
  // The log's first answer is written at once, on screen or not: the panel never says "None so far." while the run
  // has anomalies (it said so until scrolled into view), nor before the answer came.
  let renderQueued = false, panelSeen = true, panelAt = -Infinity, panelTimer = 0, answered = false, written = false;
  function render() {
    if (renderQueued) return;
    renderQueued = true;
    const now = () => { renderQueued = false; renderNow(); };
    if (ctx) ctx.beforeDraw(now); else requestAnimationFrame(now); // (the charts' frame: their marks drawn in it)
  }

  function renderNow() {
    if (!page) return; // (frames before the page's start: rendered with the log's first answer)
    const changed = remark();
    if (changed.size) {
      Obs.setOverlays(SOURCE, marks, changed);
      if (ctx) ctx.schedule();
    }
    if ((unlisted.size && panelSeen) || (answered && !written)) renderPanel();
  }

  function renderPanel() {
    const wait = panelAt + PANEL_EVERY_MS - performance.now();
    if (wait > 0) {
      if (!panelTimer) panelTimer = setTimeout(() => { panelTimer = 0; render(); }, wait);
      return;
    }
    panelAt = performance.now();
    written = written || answered;
    const box = panel();
    Obs.put(box.querySelector(".count"), byKey.size ? `${byKey.size} · ${open} ongoing` : "");
    Obs.putHidden(box.querySelector(".empty"), byKey.size > 0 || !answered);
    top = listed();
    unlisted.clear();
    const list = box.querySelector(".anomaly-list"), lis = top.map(row);
    const keep = new Set(top.map((a) => a.key));
    for (const key of rows.keys()) if (!keep.has(key)) rows.delete(key);
    const moved = lis.length !== list.children.length || lis.some((li, i) => list.children[i] !== li);
    if (moved) list.replaceChildren(...lis);
  }

  // ------------------------------------------------------------------------------------------ updates
  // New anomalies are told in one notice (Obs.toast's key): it counts those since it appeared, by kind, and names the
  // latest critical one (else the latest). A storm (a divergence trips many detectors, a sawtooth opens an episode
  // every few steps) is that notice kept up to date, not a stack of them covering the page.
  let told = null; // {notice, n, kinds: Map, worst, from: the first's step} while the notice is on screen
  function tell(news) {
    if (!told || !told.notice.isConnected) {
      told = {notice: null, n: 0, kinds: new Map(), worst: null, from: news[0].start_step};
    }
    for (const a of news) {
      told.n++;
      told.kinds.set(label(a), (told.kinds.get(label(a)) || 0) + 1);
      if (!told.worst || a.severity === "critical" || told.worst.severity !== "critical") told.worst = a;
    }
    const w = told.worst, what = [...told.kinds].map(([k, n]) => (n > 1 ? `${k} ×${n}` : k)).join(", ");
    const one = `${w.severity === "critical" ? "Critical" : "Warning"}: ${label(w)}` +
      `${w.metric ? " on " + w.metric : ""} at step ${w.start_step}: ${w.explanation}`;
    told.notice = Obs.toast(told.n > 1 ? `${told.n} new anomalies since step ${told.from} (${what}). ${one}` : one,
                            told.worst.severity, "anomalies");
  }

  function upsert(list, live) {
    const news = [];
    for (const a of list) {
      const old = byKey.get(a.key);
      if (old && old.end_step === null) open--;
      unmarked.add(a.key);
      unlisted.add(a.key);
      if (a.superseded) { byKey.delete(a.key); continue; }
      byKey.set(a.key, a);
      if (a.end_step === null) open++;
      // news: a new warning/critical, one raised to critical, or one raised from info (a single point confirmed by
      // the points after it, docs/ANOMALIES.md), also when this page never saw its info opening
      const escalated = old ? old.severity !== a.severity && (a.severity === "critical" || !COLORS[old.severity])
        : a.event === "updated";
      if (live && COLORS[a.severity] && (a.event === "opened" || escalated)) news.push(a);
    }
    if (news.length) tell(news);
    render();
  }

  Obs.frameHandlers.anomaly = (frame, c) => { ctx = c; upsert(frame.anomalies || [], true); };

  // The dashboard's own zoom (dashboard.js Obs.zoomTo: every chart, the URL's from/to, which it reads itself).
  const zoom = (from, to) => { if (to > from) Obs.zoomTo(from, to); };

  Obs.onStart.push(async (c, p) => {
    ctx = c; page = p;
    const base = "/runs/" + encodeURIComponent(p.run_id);
    logUrl = base + "/anomalies/";
    panelSeen = Obs.watchSeen(panel(), (seen) => { panelSeen = seen; if (seen) render(); });
    let fresh = [];
    try {
      const r = await fetch("/api" + base + "/anomalies/?limit=500");
      if (!r.ok) throw new Error("HTTP " + r.status);
      const body = await r.json();
      const seen = new Set(byKey.keys()); // frames that arrived meanwhile are newer than this answer: keep them
      fresh = (body.anomalies || []).filter((a) => !seen.has(a.key));
    } catch (e) { console.warn("anomalies:", e); }
    answered = true;
    upsert(fresh, false);
  });
})(window.Obs);
