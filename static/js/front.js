// The front page: the featured run's loss drawn live with its frozen forecast band (the run's socket, live.js, as the
// dashboard uses it: one series), its state and time left, and "what is happening" across runs. Moments come from
// /api/front/ (webapp/runs/moments.py's sources): read again at once when the socket brings an anomaly or an
// annotation, and every `poll_s` for the runs this page holds no socket for. Each moment links to its chart window.
"use strict";

(function (Obs) {
  const page = JSON.parse(document.getElementById("page-data").textContent);
  const chart = page.chart || {};
  const METRIC = chart.metric || "train/loss";
  const el = (id) => document.getElementById(id);
  let line = {steps: [], values: [], last: -1}; // (the store's series, series.js, once there is a run)
  let marks = page.moments || []; // this run's moments are marked on its chart
  const MARK = {anomaly: "#c62828", annotation: "#1a56b0", intervention: "#6a1b9a"};

  // ------------------------------------------------------------------------------------------- the chart
  let drawQueued = false;
  function draw() {
    drawQueued = false;
    const box = el("front-chart");
    if (!box || !window.uPlot) return;
    const t = Obs.theme(), traces = [], b = chart.band;
    if (b) {
      traces.push({x: b.steps, y: b.low, mode: "lines", line: {width: 0}, hoverinfo: "skip", showlegend: false});
      traces.push({x: b.steps, y: b.high, mode: "lines", line: {width: 0}, fill: "tonexty",
                   fillcolor: "rgba(46,125,50,0.16)", name: "forecast band", hoverinfo: "skip",
                   showlegend: false}); // (the caption names the green band: one legend row fits beside the bar)
      traces.push({x: b.steps, y: b.loss, mode: "lines", line: {color: "#2e7d32", dash: "dash", width: 1.5},
                   name: "forecast"});
    }
    traces.push({x: line.steps, y: line.values, mode: "lines", line: {color: Obs.lineColor(0), width: 1.6},
                 name: METRIC}); // (the dashboard's palette: the run's colour there)
    const hi = Math.max(line.last, 1);
    // the legend sits above the plot, left of the tool bar (top right)
    const layout = {margin: {l: 50, r: 10, t: b ? 24 : 10, b: 44}, showlegend: !!b,
                    xaxis: {title: {text: "step"}, range: b ? undefined : [0, hi], autorange: !!b},
                    yaxis: {}, hovermode: "x",
                    shapes: marks.filter((m) => m.run_id === page.run_id && Number.isFinite(m.step)).map((m) => ({
                      type: "line", x0: m.step, x1: m.step,
                      line: {color: MARK[m.kind] || t.muted, width: 1, dash: "dot"}}))};
    Obs.drawFigure(box, traces, layout, {toolbar: [Obs.PNG_TOOL], toolbarLabel: "Chart tools: training loss"});
    box.dataset.last = String(line.last);
  }
  const redraw = () => { if (!drawQueued) { drawQueued = true; requestAnimationFrame(draw); } };
  document.addEventListener("obs-theme", redraw); // (theme.js: the palette of the other theme)

  // ------------------------------------------------------------------------------------------- the header
  function showStatus(run) {
    if (!run || !el("featured-state")) return;
    el("featured-state").textContent = run.state;
    el("featured-health").textContent = run.health;
    el("featured-step").textContent = run.last_step == null ? "–" : String(run.last_step);
    const p = run.progress || {};
    const frac = p.fraction !== undefined ? p.fraction
      : (p.tokens !== null && p.token_budget ? Math.min(1, p.tokens / p.token_budget) : null);
    if (frac != null) el("featured-pct").textContent = Obs.percent(frac);
    el("featured-eta").textContent = Obs.timeLeft(run, frac ?? null, p.eta_s ?? null);
  }

  // ------------------------------------------------------------------------------------------- moments
  const node = (tag, attrs, text, ...kids) => Obs.el(tag, {...attrs, text}, ...kids); // (user text is only text)
  const fixed = (v) => (v == null ? "–" : v.toFixed(3));

  function showMoments(list) {
    if (!list.length) return;
    el("moments").replaceChildren(...list.map((m) => {
      const replies = m.count == null ? "" : ` · ${m.count} repl${m.count === 1 ? "y" : "ies"}`;
      const together = m.n > 1 ? ` · ${m.n} together` : ""; // one cause seen on several series (front/moments.py)
      return node("li", {class: "moment moment-" + m.kind, "data-moment": m.kind + "-" + m.id}, undefined,
        node("span", {class: "badge"}, m.kind), " ", node("a", {href: m.url}, m.title), " ",
        node("span", {class: "muted"}, `${m.run_name} · step ${m.step}${together}${replies}`),
        m.detail && node("p", {class: "moment-detail"}, m.detail));
    }));
  }

  function showExperiments(list) {
    const box = el("experiments");
    if (!box || !list.length) return;
    box.replaceChildren(...list.map((e) => {
      const f = e.forecast || {};
      const band = f.low != null ? ` (${fixed(f.low)}–${fixed(f.high)})` : "";
      return node("li", {"data-experiment": e.name}, undefined, node("a", {href: e.url}, e.name), " ",
        node("span", {class: "muted"}, "run ", node("a", {href: e.run_url}, e.run_name), ` · ${e.state}`),
        e.goal && node("p", {class: "moment-detail"}, e.goal), " ",
        node("span", {class: "stat"}, "forecast final loss ", node("b", {}, fixed(f.loss)), band),
        !e.verified && " ", !e.verified && node("span", {class: "badge"}, "unverified"));
    }));
  }

  let refreshing = null, again = false;
  async function refresh() {
    if (refreshing) { again = true; return; }
    refreshing = (async () => {
      try {
        const r = await fetch("/api/front/", {headers: {Accept: "application/json"}});
        if (!r.ok) return;
        const data = await r.json();
        showMoments(data.moments || []);
        marks = data.moments || [];
        redraw();
        showExperiments(data.experiments || []);
        if (data.featured && data.featured.id === page.run_id) showStatus(data.featured);
      } catch (e) { /* offline a moment: the next poll or frame tries again */ }
    })();
    await refreshing;
    refreshing = null;
    if (again) { again = false; refresh(); }
  }
  let soon = null;
  const refreshSoon = () => { clearTimeout(soon); soon = setTimeout(refresh, 150); };

  // ------------------------------------------------------------------------------------------- live
  function handle(f, store) { // (the store's view redraws the chart)
    if (f.type === "update" || f.type === "backfill") {
      for (const rw of f.rewinds || []) store.rewind(rw.to_step);
      for (const [name, s] of Object.entries(f.series || {})) store.apply(name, s);
      if (f.run) showStatus(f.run);
    } else if (f.type === "hello") {
      if (f.run) showStatus(f.run);
    } else if (f.type === "anomaly" || f.type === "annotation") {
      refreshSoon();
    }
  }

  // The one series as the dashboard holds its own (series.js, live.js): the page's window, then live points. Its
  // history in, the push tier replays what came meanwhile (never widening to the full channel for it).
  if (page.run_id) {
    showStatus(page.featured);
    const store = new Obs.Store("/api/runs/" + encodeURIComponent(page.run_id),
                                (names) => (sock.push ? sock.replay(names) : sock.ready(names)));
    const sock = new Obs.LiveSocket(page.run_id, store, () => page.last_event_id || 0, (f) => handle(f, store),
                                    (text) => { el("featured-conn").textContent = text; }, page.live_push);
    store.seed(chart.window ? {[METRIC]: chart.window} : {});
    line = store.want(METRIC, {reset: draw, added: redraw}, {points: chart.window ? chart.window.points : 800});
    sock.connect();
  }
  setInterval(refresh, Math.max(2, page.poll_s || 10) * 1000);
})(window.Obs);
