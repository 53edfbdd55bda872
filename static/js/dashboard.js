// Run dashboard: history from the JSON API, then live updates over the WebSocket (live.js; no polling), held in one
// Obs.Store (series.js) and drawn by views: line charts (charts.js), the MoE router heatmap (moe.js), the data panel
// (datapanel.js), the run header (runhead.js), the event log (events.js). The view (charts in order, visible steps,
// x axis, log axes, smoothing) lives in the URL and localStorage (view.js); zooming one chart zooms them all.
//
// Extension points for feature modules loaded before this file (anomalies.js, annotations.js, …):
//   Obs.frameHandlers[type] = (frame, ctx) => {}   live frames of your own type
//   Obs.onStart.push((ctx, page) => {})            once the charts in view have painted (their history is in)
//   Obs.onEvents.push((events, ctx) => {})         the run's events as they arrive (history, live, backfill)
//   Obs.setOverlays(source, [{id, x0, x1?, metric?, label?, color?, onClick?}])   marks on every line chart
//   Obs.toast(text, level)                          a transient notice
//   Obs.zoomTo(fromStep, toStep) / Obs.zoomTo(null) zoom every chart to steps (null: the whole run)
//   ctx: {store, schedule, beforeDraw(fn), view, xaxis (toX(steps) / toStep(x)), registry, rewinds, page, painted}
//   ctx.beforeDraw(fn)                              fn once at the next frame, before the views draw in it
"use strict";

(function () {
  const Obs = window.Obs;
  const page = JSON.parse(document.getElementById("page-data").textContent);
  const runId = page.run_id;
  const apiBase = "/api/runs/" + encodeURIComponent(runId);
  const $ = (id) => document.getElementById(id);
  const safely = (what, fn, ...args) => { try { fn(...args); } catch (e) { console.error(what + " failed:", e); } };
  const specs = new Map(page.charts.map((c) => [c.id || c.metrics[0], c])); // default charts by id
  const known = new Set(); // every series name the run has
  const views = new Set();
  const charts = new Map(); // chart id -> LineChart
  const FRAME_BUDGET_MS = 8, FIRST_PAINT_BY_MS = 5000;
  let redrawQueued = false, redrawCursor = 0, manifestFetches = 0, manifestInflight = false, started = false,
    firstPaint = false;
  const beforeDraw = new Set(); // feature modules' functions to run at the next frame, before the views draw
  let preDrawing = false;
  let showView = () => {}; // the x axis, smoothing and range controls from the view (view.js viewControls)
  let zoomT0 = null, zoomWaiting = new Set(), zoomSource = null, zoomSourceMs = null, zoomCharts = {};

  const registry = new Obs.Registry(page.registry);
  const view = new Obs.View([...specs.keys()]);
  const store = new Obs.Store(apiBase, (names) => live.ready(names));
  const ctx = {store, schedule: scheduleRedraw, rewinds: [], view, registry, bounds: page.bounds || {},
               page, chartAction, zoomTo, zoomDrawn,
               beforeDraw: (fn) => { beforeDraw.add(fn); scheduleRedraw(); }};
  ctx.xaxis = new Obs.XAxis(store, page, () => redrawAll());
  const events = new Obs.EventLog($("events-section"), addRewind);
  let router = null; // the MoE router panel (moe.js, loaded after the first paint: afterPaint)
  // (its series, moe.js's pattern: a run that has them shows the panel at once, where it will be drawn)
  const routerHist = page.router_metric && new RegExp("^" + page.router_metric.replace("{name}", "routing_hist")
    .split("{layer}").map((p) => p.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")).join("\\d+") + "/\\d+$");
  const data = new Obs.DataPanel(ctx, page.mixture);
  const header = new Obs.RunHeader(() => data.stageLabel());
  const picker = Obs.chartPicker(registry, view, charts);
  // The connection's word, except that an ended run is "stopped" (or "failed"), not "live", while its socket is open.
  let conn = "";
  const ENDED = new Set(["stopped", "failed"]); // runs/models.py ENDED_STATES
  const showConn = () => {
    const t = conn === "live" && ENDED.has(ctx.runState) ? ctx.runState : conn;
    if (t && $("stat-conn").textContent !== t) $("stat-conn").textContent = t;
  };
  const live = new Obs.LiveSocket(runId, store, () => events.lastId, handle, (t) => { conn = t; showConn(); },
                                  page.live_push);
  views.add(data);
  (page.rewinds || []).forEach(addRewind);

  // Views draw in animation frames (none in a hidden tab: it catches up on return), each at most once a frame
  // however many live frames came; past FRAME_BUDGET_MS of drawing the rest wait for the next frame. Feature
  // modules' work for the views (the anomalies' marks) runs first in the same frame (ctx.beforeDraw): in a frame of
  // its own it made the charts' marks a second frame, its whole style, layout and paint again, every live step.
  function scheduleRedraw() {
    if (redrawQueued || preDrawing) return; // (a pre-draw's views draw in this frame)
    redrawQueued = true;
    requestAnimationFrame(() => {
      redrawQueued = false;
      const pre = [...beforeDraw];
      beforeDraw.clear();
      preDrawing = true;
      for (const fn of pre) safely("pre-draw", fn);
      preDrawing = false;
      // Charts built since the last frame that the observer has not answered for (charts.js watchSeen): drawn in
      // this frame if seen now, not in the next one after its answer (the first paint waited a frame for it)
      const unseen = [...charts.values()].filter((ch) => !ch.observed);
      Obs.seenNow(unseen.map((ch) => ch.box)).forEach((seen, i) => {
        unseen[i].visible = seen; unseen[i].observed = true;
      });
      // A zoom's charts draw first, the zoomed one first, all in this frame (someone waits for them); then the
      // other views, within the frame's budget.
      const ready = [...zoomWaiting].filter((ch) => ch && ch.zoomPending && !ch.fetching && ch.dirty && ch.visible)
        .sort((a, b) => (b === zoomSource) - (a === zoomSource));
      for (const ch of ready) safely("redraw", () => ch.redraw());
      const t0 = performance.now(), all = [...views];
      for (let k = 0; k < all.length; k++) {
        const v = all[(redrawCursor + k) % all.length];
        safely("redraw", () => v.redraw());
        // (until first paint, at the latest FIRST_PAINT_BY_MS into the page, one frame draws them all: one layout)
        if ((firstPaint || t0 > FIRST_PAINT_BY_MS) && performance.now() - t0 > FRAME_BUDGET_MS && k < all.length - 1) {
          redrawCursor = (redrawCursor + k + 1) % all.length; // the next frame starts with the next view
          scheduleRedraw();
          break;
        }
      }
      nonfiniteNote();
      const drawn = (ch) => !ch.dirty && ch.items.every(
        (it) => it.series && (it.series.loaded || it.series.waiting) && !it.series.loading);
      if (!firstPaint && started && [...charts.values()].every((ch) => ch.observed && (!ch.visible || drawn(ch)))) {
        firstPaint = true;
        performance.mark("obs-first-paint"); // every chart in view drawn, hover, zoom and tools included
        performance.mark("obs-charts-drawn");
        setTimeout(afterPaint, 0); // (after this frame's paint)
      }
    });
  }
  function redrawAll() { charts.forEach((ch) => { ch.full = true; ch.dirty = true; }); scheduleRedraw(); }

  // ------------------------------------------------------------------------------------------ charts
  function specFor(id) {
    return specs.get(id) || {metrics: [id], title: registry.info(id).title};
  }

  function addChart(id) {
    if (charts.has(id)) return charts.get(id);
    const ch = new Obs.LineChart(ctx, specFor(id), $("charts"));
    Obs.registerChart(ch);
    charts.set(id, ch);
    views.add(ch);
    for (const name of known) if (ch.wants(name)) ch.addTrace(name);
    if (view.range) ch.setRange();
    return ch;
  }

  // Make the DOM follow view.charts: create, drop, and order.
  function syncCharts() {
    const want = view.charts;
    for (const [id, ch] of charts) {
      if (want.includes(id)) continue;
      views.delete(ch); Obs.unregisterChart(ch); ch.destroy(); charts.delete(id);
    }
    for (const id of want) {
      const ch = addChart(id);
      $("charts").appendChild(ch.box); // in view order (appending an attached node moves it)
    }
    $("charts-empty").hidden = want.length > 0;
    picker.render();
    scheduleRedraw();
  }

  function chartAction(id, action) { Obs.moveChart(view, charts, id, action, specFor(id).title || id); }

  // ------------------------------------------------------------------------------------------ zoom
  // A new visible range (steps; null: the whole run), from a chart (`source`), the step fields or the URL. The
  // page measures itself (bench/dashboard.py): window.__obsZoom = {ms: every visible chart drawn with its window,
  // sourceMs: the zoomed one, charts: {id: ms}}, from "obs-zoom-start" to "obs-zoom-done".
  function zoomTo(range, source) {
    range = Obs.wholeRange(range);
    const cur = view.range;
    if ((!range && !cur) || (range && cur && range[0] === cur[0] && range[1] === cur[1])) return;
    zoomT0 = performance.now(); zoomSource = source || null;
    window.__obsZoom = null;
    performance.mark("obs-zoom-start");
    zoomWaiting = new Set([...charts.values()].filter((ch) => ch.visible && range));
    zoomCharts = {};
    view.set({range}, true); // (the URL follows once the charts are drawn)
    if (!zoomWaiting.size) zoomDrawn(null);
  }
  Obs.zoomTo = (from, to) => zoomTo(from === null || from === undefined ? null : [from, to]);

  // `chart` has drawn the zoom's window.
  function zoomDrawn(chart) {
    if (!zoomWaiting.delete(chart) && chart) return;
    if (zoomT0 === null) return;
    const ms = performance.now() - zoomT0;
    if (chart) zoomCharts[chart.id] = Math.round(ms * 10) / 10;
    if (chart && chart === zoomSource) zoomSourceMs = ms;
    if (zoomWaiting.size === 0) {
      performance.mark("obs-zoom-done");
      window.__obsZoom = {ms, sourceMs: zoomSource ? zoomSourceMs : null, charts: zoomCharts};
      zoomT0 = null;
      view.saveSoon(); // (a task after this frame's drawing)
    }
  }

  // ------------------------------------------------------------------------------------------ controls
  const X_WHY = {tokens: "this run publishes no token count", time: "not enough timestamps"};
  function showControls() {
    const avail = ctx.xaxis.available();
    showView(ctx.xaxis.mode, (mode) => (avail[mode] ? "" : X_WHY[mode]));
  }

  view.onChange((keys) => {
    if (keys.includes("charts")) syncCharts();
    if (keys.includes("x")) { view.x = ctx.xaxis.setMode(view.x); redrawAll(); }
    if (keys.includes("log") || keys.includes("smooth")) redrawAll();
    if (keys.includes("range")) { // the zoomed chart's window first
      [...charts.values()].sort((a, b) => (b === zoomSource) - (a === zoomSource))
        .forEach((ch) => ch.setRange());
      router?.setRange();
    }
    showControls();
  });

  function wireControls() {
    if (window.matchMedia("(max-width: 600px)").matches && !view.range) $("view-controls").open = false; // charts first
    showView = Obs.viewControls(view, (range) => zoomTo(range), (v) => parseInt(v, 10),
                                "Enter a first and a last step, the last after the first.", (x) => view.set({x}));
    document.addEventListener("obs-theme", () => { redrawAll(); router?.reset(); });
  }

  // ------------------------------------------------------------------------------------------ run state
  function nonfiniteNote() {
    const bad = [...store.all()].filter((s) => s.nfTotal > 0);
    const el = $("nonfinite-note");
    Obs.putHidden(el, bad.length === 0);
    const text = bad.map((s) => `${registry.info(s.name).title}: ${s.nfTotal} non-finite value(s)` +
      (s.nfSteps.length ? `, first at step ${s.nfSteps[0]} (${s.nfKinds[0]})` : "")).join(" · ");
    if (el.textContent !== text) el.textContent = text;
  }

  function addRewind(r) {
    if (ctx.rewinds.some((x) => x.from_step === r.from_step && x.to_step === r.to_step)) return;
    ctx.rewinds.push(r); // (the time axis needs nothing: XAxis.anchor forgets later steps as the run redoes them)
    redrawAll();
  }

  function addEvents(list) {
    events.add(list);
    for (const fn of Obs.onEvents) safely("event hook", fn, list, ctx);
    for (const ev of list) { // a restart's "starting" comes at step 0, before it restores: no anchor
      if (ev.t && ev.step !== null && !(ev.kind === "state" && ev.name === "starting")) {
        ctx.xaxis.anchor(ev.step, Date.parse(ev.t) / 1000);
      }
    }
  }

  // A series name the run has (metric list, live frames, new_series): offer it, let the views claim it.
  function addKnown(names) {
    const fresh = names.filter((n) => !known.has(n));
    if (!fresh.length) return;
    for (const name of fresh) {
      known.add(name);
      store.discover(name);
      charts.forEach((ch) => { if (ch.wants(name)) ch.addTrace(name); });
      if (router) router.discover(name);
      else if (routerHist && routerHist.test(name)) $("router-panel").hidden = false;
      data.discover(name);
      // The trainer records its manifest before its first mixture metrics: fetch it once they appear.
      if (!data.hasManifest() && name.startsWith(page.mixture.weight_prefix) && started) fetchManifest();
    }
    picker.discover(fresh);
    if (started) showControls();
  }

  async function fetchManifest() { // one-off, on a sign that the manifest exists: not polling
    if (manifestInflight || manifestFetches >= 3) return;
    manifestFetches++; manifestInflight = true;
    try {
      const detail = await fetch(apiBase + "/").then((r) => r.json());
      data.setManifest(detail.manifest);
    } catch (e) {
      console.warn("manifest:", e);
    } finally {
      manifestInflight = false;
    }
  }
  function showRun(run) {
    if (!run) return;
    header.show(run);
    if (ctx.runState !== run.state) { // "compiling…" on empty charts; "stopped" for the connection
      ctx.runState = run.state; charts.forEach((ch) => ch.note()); showConn();
    }
    const p = run.progress || run.heartbeat; // the trainer's rate: live charts keep room on x for the next points
    if (p && typeof p.steps_per_s === "number") ctx.stepsPerS = Obs.heard(run) ? p.steps_per_s : 0;
    if (run.last_heartbeat_at && run.last_step !== null) ctx.xaxis.anchor(run.last_step,
      Date.parse(run.last_heartbeat_at) / 1000);
  }
  function handle(msg) {
    switch (msg.type) {
      case "hello": showRun(msg.run); break;
      case "update":
      case "backfill": {
        for (const rw of msg.rewinds || []) store.rewind(rw.to_step);
        addEvents(msg.events || []);
        const series = msg.series || {};
        let fresh = null; // (for-in: no arrays of every name, ~240 series an update)
        for (const name in series) if (!known.has(name)) (fresh || (fresh = [])).push(name);
        if (fresh) addKnown(fresh);
        addKnown(msg.new_series || []);
        for (const name in series) store.apply(name, series[name]);
        if (msg.run) showRun(msg.run);
        for (const name of msg.truncated || []) store.reload(name);
        scheduleRedraw();
        break;
      }
      case "error": console.warn("live:", msg.error); break;
      default: { // a feature module's own frame type (anomalies.js, annotations.js, …)
        const h = Obs.frameHandlers[msg.type];
        if (h) { h(msg, ctx); scheduleRedraw(); }
      }
    }
  }

  // ------------------------------------------------------------------------------------------ start
  function start() {
    // The page carries the run, its metric list and the default charts' first windows (one round trip less).
    const detail = page.detail, list = {metrics: page.metrics || []};
    store.seed(page.initial_windows);
    showRun(detail);
    addEvents(detail.events || []);
    events.lastId = Math.max(events.lastId, detail.last_event_id || 0);
    for (const m of list.metrics) { store.meta.set(m.name, m); store.discover(m.name); }
    if (!list.metrics.length) store.exists = new Set(); // compiling: ask for nothing that is not there yet
    data.setManifest(detail.manifest);
    view.x = ctx.xaxis.setMode(view.x);
    syncCharts();
    addKnown(list.metrics.map((m) => m.name));
    started = true;
    wireControls();
    showControls();
    setTimeout(afterPaint, 3000); // (at the latest: a page whose charts never paint still gets them)
    live.connect(); // series still loading subscribe themselves (Store.onReady) once their history is in
    scheduleRedraw();
  }

  // Once the charts in view have painted, what their frame does not need: the URL naming the view (replaceState), the
  // modules' starts (their API reads: the page's first fetch) and the lazy scripts (<meta name="obs-lazy-script">: the
  // MoE router panel, annotations), fetched together and run in order; then the router panel and their onStart.
  let lazy = null;
  function afterPaint() {
    if (lazy) return;
    view.save(); // the URL now names the whole view: copy it from the address bar
    ctx.painted = true; // the charts' download links, which their first frame left (downloads.js)
    charts.forEach((ch) => Obs.downloadLinks(ch));
    for (const fn of Obs.onStart) safely("module start", fn, ctx, page);
    const ran = Obs.onStart.length;
    lazy = Promise.all([...document.querySelectorAll('meta[name="obs-lazy-script"]')].map((m) => new Promise((ok) => {
      document.head.appendChild(Obs.el("script", {src: m.content, async: false, on: { // (run in document order)
        load: ok, error: () => { console.error("a script failed to load:", m.content); ok(); }}}));
    }))).then(() => {
      if (Obs.RouterPanel) {
        router = new Obs.RouterPanel(ctx, page.router_metric);
        views.add(router);
        known.forEach((name) => router.discover(name));
      }
      for (const fn of Obs.onStart.slice(ran)) safely("module start", fn, ctx, page);
      scheduleRedraw();
    });
  }

  start();
})();
