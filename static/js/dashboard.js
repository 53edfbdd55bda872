// Run dashboard: history from the JSON API, then live updates over the WebSocket (no polling).
// Protocol: webapp/live/protocol.py. Each chart keeps the last step it holds; on (re)connect it sends
// "resume" with those steps, and every incoming point with step <= that is dropped, so there is no gap and no
// duplicate. Non-finite values (NaN/Inf) are drawn as red markers at the top of the chart and counted.
"use strict";

(function () {
  const page = JSON.parse(document.getElementById("page-data").textContent);
  const runId = page.run_id;
  const apiBase = "/api/runs/" + encodeURIComponent(runId);
  const HISTORY_POINTS = 2000; // downsampled history per chart (min/max buckets keep every spike)
  const MAX_CLIENT_POINTS = 50000; // past this a chart reloads its downsampled history
  const charts = new Map(); // metric name -> chart state
  const known = new Set(); // every series name the run has
  let lastEventId = 0;
  let ws = null;
  let attempts = 0;
  let lastHeartbeat = null;
  let redrawQueued = false;

  const $ = (id) => document.getElementById(id);

  function slug(name) { return name.replace(/[^A-Za-z0-9]+/g, "-"); }

  // ------------------------------------------------------------------------------------------ charts
  function addChart(name) {
    if (charts.has(name)) return charts.get(name);
    const box = document.createElement("div");
    box.className = "chart";
    box.dataset.metric = name;
    box.innerHTML = '<h3><span class="name"></span><span class="note"></span></h3><div class="plot"></div>';
    box.querySelector(".name").textContent = name;
    const plot = box.querySelector(".plot");
    plot.id = "chart-" + slug(name);
    $("charts").appendChild(box);
    const ch = {name, box, plot, steps: [], values: [], nfSteps: [], nfKinds: [], nfTotal: 0, last: -1,
                loading: true, queue: [], newX: [], newY: [], newNfX: [], newNfK: [], full: true};
    charts.set(name, ch);
    Plotly.newPlot(plot, traces(ch), layout(), {responsive: true, displaylogo: false});
    return ch;
  }

  function traces(ch) {
    return [
      {x: ch.steps.slice(), y: ch.values.slice(), type: "scatter",
       mode: "lines", line: {width: 1.3, color: "#1f5fbf"}, name: ch.name, hovertemplate: "step %{x}<br>%{y}<extra></extra>"},
      {x: ch.nfSteps.slice(), y: ch.nfSteps.map(() => 1), text: ch.nfKinds.slice(), yaxis: "y2", type: "scatter",
       mode: "markers", marker: {color: "#c62828", symbol: "x", size: 9}, name: "non-finite",
       hovertemplate: "step %{x}: %{text}<extra></extra>"},
    ];
  }

  function layout() {
    return {margin: {l: 55, r: 10, t: 8, b: 30}, showlegend: false, hovermode: "closest",
            xaxis: {title: {text: "step"}, automargin: true},
            yaxis: {automargin: true, exponentformat: "e"},
            yaxis2: {overlaying: "y", range: [0, 1.05], visible: false, fixedrange: true}};
  }

  function rewind(ch, toStep) {
    if (ch.loading) { ch.queue.push(["rewind", toStep]); return; }
    let i = ch.steps.length;
    while (i > 0 && ch.steps[i - 1] > toStep) i--;
    ch.steps.length = i; ch.values.length = i;
    let j = ch.nfSteps.length;
    while (j > 0 && ch.nfSteps[j - 1] > toStep) j--;
    ch.nfTotal -= ch.nfSteps.length - j;
    ch.nfSteps.length = j; ch.nfKinds.length = j;
    ch.last = Math.min(ch.last, toStep);
    ch.full = true;
  }

  function append(ch, s) {
    if (ch.loading) { ch.queue.push(["series", s]); return; }
    const kinds = new Map((s.nonfinite || []).map(([step, kind]) => [step, kind]));
    for (let i = 0; i < s.steps.length; i++) {
      const step = s.steps[i];
      if (step <= ch.last) continue; // already held: resume/live overlap
      const v = s.values[i];
      if (v === null) {
        ch.nfSteps.push(step); ch.nfKinds.push(kinds.get(step) || "NaN"); ch.nfTotal++;
        ch.newNfX.push(step); ch.newNfK.push(kinds.get(step) || "NaN");
      } else {
        ch.steps.push(step); ch.values.push(v);
        ch.newX.push(step); ch.newY.push(v);
      }
      ch.last = step;
    }
    if (ch.steps.length + ch.nfSteps.length > MAX_CLIENT_POINTS) loadHistory(ch);
  }

  async function loadHistory(ch) {
    ch.loading = true;
    try {
      const r = await fetch(apiBase + "/metrics/" + encodeURI(ch.name) + "/?points=" + HISTORY_POINTS);
      if (r.status === 404) { ch.last = -1; setHistory(ch, null); return; }
      if (!r.ok) throw new Error("HTTP " + r.status);
      setHistory(ch, await r.json());
    } catch (e) {
      console.warn("history of", ch.name, "failed:", e);
      setTimeout(() => loadHistory(ch), 2000);
    }
  }

  function setHistory(ch, data) {
    ch.steps = []; ch.values = []; ch.nfSteps = []; ch.nfKinds = []; ch.nfTotal = 0; ch.last = -1;
    if (data) {
      const kinds = new Map(data.nonfinite.map(([step, kind]) => [step, kind]));
      data.steps.forEach((step, i) => {
        const v = data.values[i];
        if (v === null) { ch.nfSteps.push(step); ch.nfKinds.push(kinds.get(step) || "NaN"); }
        else { ch.steps.push(step); ch.values.push(v); }
      });
      const c = data.nonfinite_counts;
      ch.nfTotal = c.NaN + c.Infinity + c["-Infinity"];
      ch.last = data.end === null ? -1 : data.end;
    }
    ch.loading = false;
    ch.full = true;
    const queued = ch.queue; ch.queue = [];
    for (const [op, arg] of queued) op === "rewind" ? rewind(ch, arg) : append(ch, arg);
    scheduleRedraw();
    if (ws && ws.readyState === WebSocket.OPEN) sendResume([ch.name]);
  }

  function scheduleRedraw() {
    if (redrawQueued) return;
    redrawQueued = true;
    requestAnimationFrame(() => { redrawQueued = false; charts.forEach(redraw); nonfiniteNote(); });
  }

  function redraw(ch) {
    if (ch.loading) return;
    if (ch.full) {
      Plotly.react(ch.plot, traces(ch), layout());
    } else {
      if (ch.newX.length) Plotly.extendTraces(ch.plot, {x: [ch.newX], y: [ch.newY]}, [0]);
      if (ch.newNfX.length) {
        Plotly.extendTraces(ch.plot, {x: [ch.newNfX], y: [ch.newNfX.map(() => 1)], text: [ch.newNfK]}, [1]);
      }
    }
    ch.full = false; ch.newX = []; ch.newY = []; ch.newNfX = []; ch.newNfK = [];
    const note = ch.box.querySelector(".note");
    note.textContent = ch.nfTotal ? ch.nfTotal + " non-finite" : "";
  }

  function nonfiniteNote() {
    const bad = [...charts.values()].filter((c) => c.nfTotal > 0);
    const el = $("nonfinite-note");
    el.hidden = bad.length === 0;
    el.textContent = bad.map((c) => `${c.name}: ${c.nfTotal} non-finite value(s), first at step ${c.nfSteps[0]}` +
                                    ` (${c.nfKinds[0]})`).join(" · ");
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
      const li = document.createElement("li");
      li.className = "kind-" + ev.kind;
      const extra = ev.kind === "rewind" ? ` ${ev.payload.from_step} → ${ev.payload.to_step}` :
        (ev.payload && ev.payload.detail ? ` — ${ev.payload.detail}` : "");
      li.textContent = `step ${ev.step ?? "–"} · ${ev.kind}: ${ev.name}${extra}`;
      list.prepend(li);
    }
    while (list.children.length > 200) list.lastChild.remove();
  }

  function addKnown(names) {
    const picker = $("metric-picker");
    for (const name of names) {
      if (known.has(name)) continue;
      known.add(name);
      const opt = document.createElement("option");
      opt.value = name; opt.textContent = name;
      picker.appendChild(opt);
    }
  }

  // ------------------------------------------------------------------------------------------ live
  function sendResume(names) {
    const after = {};
    for (const name of names) after[name] = charts.get(name).last;
    ws.send(JSON.stringify({type: "resume", metrics: names, after, after_event: lastEventId}));
  }

  function connect() {
    const proto = location.protocol === "https:" ? "wss://" : "ws://";
    ws = new WebSocket(proto + location.host + "/ws/runs/" + encodeURIComponent(runId) + "/");
    ws.onopen = () => {
      attempts = 0;
      $("stat-conn").textContent = "live";
      const ready = [...charts.values()].filter((c) => !c.loading).map((c) => c.name);
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
        for (const rw of msg.rewinds || []) charts.forEach((ch) => rewind(ch, rw.to_step));
        addEvents(msg.events || []);
        for (const [name, s] of Object.entries(msg.series || {})) {
          addKnown([name]);
          const ch = charts.get(name);
          if (ch) append(ch, s);
        }
        addKnown(msg.new_series || []);
        if (msg.run) showRun(msg.run);
        for (const name of msg.truncated || []) if (charts.has(name)) loadHistory(charts.get(name));
        scheduleRedraw();
        break;
      case "error": console.warn("live:", msg.error); break;
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
    addKnown(list.metrics.map((m) => m.name));
    const wanted = page.default_metrics.slice();
    for (const m of list.metrics) if (wanted.length < 4 && !wanted.includes(m.name)) wanted.push(m.name);
    await Promise.all(wanted.map((name) => loadHistory(addChart(name))));
    connect();
    setInterval(tickHeartbeat, 1000); // display only: ages the "last heartbeat" label
  }

  $("metric-picker").addEventListener("change", (e) => {
    const name = e.target.value;
    e.target.value = "";
    if (name && !charts.has(name)) loadHistory(addChart(name));
  });

  start();
})();
