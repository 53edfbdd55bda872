// Run dashboard: history from the JSON API, then live updates over the WebSocket (no polling).
// Protocol: webapp/live/protocol.py. Series live in one Obs.Store (series.js: history, resume bookkeeping, dedup,
// rewinds); views draw them: line charts (charts.js), the MoE router heatmap and the data panel (moe.js).
// On (re)connect the page sends "resume" with the last step each series holds, so there is no gap and no
// duplicate. Non-finite values (NaN/Inf) are drawn as red markers and counted.
"use strict";

(function () {
  const Obs = window.Obs;
  // Extension points for feature modules loaded before this file: Obs.frameHandlers[type] = (frame, ctx) => {}
  // for live frames, Obs.onStart.push((ctx, page) => {}) to run once the run's history is in, Obs.toast().
  const page = JSON.parse(document.getElementById("page-data").textContent);
  const runId = page.run_id;
  const apiBase = "/api/runs/" + encodeURIComponent(runId);
  const RESUME_CHUNK = 200; // protocol.MAX_RESUME_METRICS is 256
  const known = new Set(); // every series name the run has
  const views = new Set();
  const charts = new Map(); // chart id -> LineChart
  let lastEventId = 0;
  let ws = null;
  let attempts = 0;
  let lastHeartbeat = null;
  let redrawQueued = false;
  let manifestFetches = 0;
  let started = false; // the metric list is in: later mixture series may mean a manifest arrived

  const $ = (id) => document.getElementById(id);

  const store = new Obs.Store(apiBase, (names) => {
    if (ws && ws.readyState === WebSocket.OPEN) sendResume(names);
  });
  // rewinds: [{from_step, to_step}] drawn on every line chart, so a resumed run reads as one line, rewind marked
  const ctx = {store, schedule: scheduleRedraw, rewinds: []};

  function scheduleRedraw() {
    if (redrawQueued) return;
    redrawQueued = true;
    requestAnimationFrame(() => {
      redrawQueued = false;
      views.forEach((v) => {
        try { v.redraw(); } catch (e) { console.error("redraw failed:", e); }
      });
      nonfiniteNote();
    });
  }

  function addChart(spec) {
    const id = spec.id || spec.metrics[0];
    if (charts.has(id)) return charts.get(id);
    const ch = new Obs.LineChart(ctx, spec, $("charts"));
    Obs.registerChart(ch);
    charts.set(id, ch);
    views.add(ch);
    for (const name of known) if (ch.wants(name)) ch.addTrace(name);
    return ch;
  }

  const router = new Obs.RouterPanel(ctx, page.router_metric);
  const data = new Obs.DataPanel(ctx, page.mixture);
  views.add(router); views.add(data);

  function nonfiniteNote() {
    const bad = [...store.all()].filter((s) => s.nfTotal > 0);
    const el = $("nonfinite-note");
    el.hidden = bad.length === 0;
    el.textContent = bad.map((s) => `${s.name}: ${s.nfTotal} non-finite value(s)` +
      (s.nfSteps.length ? `, first at step ${s.nfSteps[0]} (${s.nfKinds[0]})` : "")).join(" · ");
  }

  // ------------------------------------------------------------------------------------------ run state
  function showRun(run) {
    if (!run) return;
    const st = $("badge-state"); st.textContent = run.state; st.className = "badge state-" + run.state;
    $("badge-phase").textContent = run.phase || "–";
    const h = $("badge-health"); h.textContent = run.health; h.className = "badge health-" + run.health;
    if (run.last_step !== null) $("stat-step").textContent = run.last_step;
    if (run.last_heartbeat_at) lastHeartbeat = new Date(run.last_heartbeat_at);
    tickHeartbeat();
  }

  function tickHeartbeat() {
    $("stat-heartbeat").textContent = lastHeartbeat
      ? Math.max(0, Math.round((Date.now() - lastHeartbeat.getTime()) / 1000)) + " s ago" : "–";
  }

  function addEvents(events) {
    const list = $("events");
    for (const ev of events) {
      if (ev.id <= lastEventId) continue;
      lastEventId = ev.id;
      if (ev.kind === "rewind" && ev.payload && ev.payload.from_step > ev.payload.to_step) {
        ctx.rewinds.push({from_step: ev.payload.from_step, to_step: ev.payload.to_step});
        charts.forEach((ch) => ch.reset());
      }
      const li = document.createElement("li");
      li.className = "kind-" + ev.kind;
      const extra = ev.kind === "rewind" ? ` ${ev.payload.from_step} → ${ev.payload.to_step}` :
        (ev.payload && ev.payload.detail ? ` — ${ev.payload.detail}` : "");
      li.textContent = `step ${ev.step ?? "–"} · ${ev.kind}: ${ev.name}${extra}`;
      list.prepend(li);
    }
    while (list.children.length > 200) list.lastChild.remove();
  }

  // A series name the run has (metric list, live frames, new_series): offer it, let the views claim it.
  function addKnown(names) {
    const picker = $("metric-picker");
    for (const name of names) {
      if (known.has(name)) continue;
      known.add(name);
      const opt = document.createElement("option");
      opt.value = name; opt.textContent = name;
      picker.appendChild(opt);
      charts.forEach((ch) => { if (ch.wants(name)) ch.addTrace(name); });
      router.discover(name);
      data.discover(name);
      // The trainer records its manifest before its first mixture metrics: fetch it once they appear.
      if (!data.hasManifest() && name.startsWith(page.mixture.weight_prefix) && started) fetchManifest();
    }
  }

  let manifestInflight = false;
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

  // ------------------------------------------------------------------------------------------ live
  function sendResume(names) {
    names = names.filter((n) => store.has(n) && !store.get(n).loading);
    for (let i = 0; i < names.length; i += RESUME_CHUNK) {
      const chunk = names.slice(i, i + RESUME_CHUNK);
      const after = {};
      for (const name of chunk) after[name] = store.get(name).last;
      ws.send(JSON.stringify({type: "resume", metrics: chunk, after, after_event: lastEventId}));
    }
  }

  function connect() {
    const proto = location.protocol === "https:" ? "wss://" : "ws://";
    ws = new WebSocket(proto + location.host + "/ws/runs/" + encodeURIComponent(runId) + "/");
    ws.onopen = () => {
      attempts = 0;
      $("stat-conn").textContent = "live";
      const ready = store.ready();
      if (ready.length) sendResume(ready);
    };
    ws.onmessage = (ev) => handle(JSON.parse(ev.data));
    ws.onclose = (ev) => {
      ws = null;
      if (ev.code === 4404) { $("stat-conn").textContent = "run not found"; return; }
      const delay = Math.min(10000, 500 * 2 ** attempts++);
      $("stat-conn").textContent = "reconnecting…";
      setTimeout(connect, delay);
    };
  }

  function handle(msg) {
    switch (msg.type) {
      case "hello": showRun(msg.run); break;
      case "update":
      case "backfill":
        for (const rw of msg.rewinds || []) store.rewind(rw.to_step);
        addEvents(msg.events || []);
        addKnown(Object.keys(msg.series || {}));
        addKnown(msg.new_series || []);
        for (const [name, s] of Object.entries(msg.series || {})) store.apply(name, s);
        if (msg.run) showRun(msg.run);
        for (const name of msg.truncated || []) store.reload(name);
        scheduleRedraw();
        break;
      case "error": console.warn("live:", msg.error); break;
      default: {
        // Feature modules (anomalies.js, annotations.js, ...) handle their own frame types.
        const h = Obs.frameHandlers[msg.type];
        if (h) { h(msg, ctx); scheduleRedraw(); }
      }
    }
  }

  // ------------------------------------------------------------------------------------------ start
  async function start() {
    const [detail, list] = await Promise.all([
      fetch(apiBase + "/").then((r) => r.json()),
      fetch(apiBase + "/metrics/").then((r) => r.json()),
    ]);
    showRun(detail);
    addEvents(detail.events || []);
    lastEventId = Math.max(lastEventId, detail.last_event_id || 0);
    for (const m of list.metrics) store.meta.set(m.name, m);
    data.setManifest(detail.manifest);
    for (const spec of page.charts) addChart(spec);
    addKnown(list.metrics.map((m) => m.name));
    started = true;
    for (const fn of Obs.onStart) { try { fn(ctx, page); } catch (e) { console.error("module start failed:", e); } }
    connect(); // series still loading subscribe themselves (Store.onReady) once their history is in
    setInterval(tickHeartbeat, 1000); // display only: ages the "last heartbeat" label
  }

  $("metric-picker").addEventListener("change", (e) => {
    const name = e.target.value;
    e.target.value = "";
    if (name && !charts.has(name)) addChart({metrics: [name], title: name});
  });

  start();
})();
