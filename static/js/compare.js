// The compare page: the runs of the URL (runs=a,b,c) read once from /api/compare/ (their series, x axes), one
// Obs.CompareChart per metric with one line per run, in the run's colour. Everything the visitor changes — runs,
// charts, x axis (step, tokens, wall time since each run's start), smoothing, log x, log y per chart, the zoomed
// range — goes through Obs.CompareView, which rewrites the URL (history.replaceState): a reload or a shared link
// shows the same view. No live socket: the history as it was when the page (or the run set) was loaded.
"use strict";

(function () {
  const Obs = window.Obs;
  const page = JSON.parse(document.getElementById("page-data").textContent);
  const $ = (id) => document.getElementById(id);
  const registry = new Obs.Registry(page.registry);
  const view = new Obs.CompareView(page.default_charts);
  const lines = new Map(); // run id -> Obs.RunLine
  const charts = new Map(); // metric -> Obs.CompareChart
  const listed = new Map(); // run id -> its summary from /api/runs/ (the run picker)
  let order = []; // the RunLines compared, in the URL's order (colours follow it)
  let redrawQueued = false, loadGen = 0, keepStatus = false, showView = () => {};
  // Written by an importer (W&B, TensorBoard, ...) rather than streamed live: any source but "stream".
  const imported = (source) => !!source && source !== "stream";

  const axis = { // the shared x axis: the view's range is already in its units
    get mode() { return view.x; },
    toX: (xs) => xs.slice(), xOf: (x) => x, toStep: (x) => x, axisType: () => "linear",
    title: () => ({step: "step", tokens: "tokens trained", time: "wall time since each run's start"})[view.x],
  };
  const ctx = {runs: () => order, view, xaxis: axis, registry, bounds: {}, rewinds: [], schedule, chartAction,
               zoomTo, zoomDrawn: () => {}};

  function schedule() {
    if (redrawQueued) return;
    redrawQueued = true;
    requestAnimationFrame(() => {
      redrawQueued = false;
      charts.forEach((ch) => { try { ch.redraw(); } catch (e) { console.error("redraw failed:", e); } });
    });
  }

  function redrawAll() { charts.forEach((ch) => { ch.full = true; ch.dirty = true; }); schedule(); }

  const status = (text) => { $("compare-status").textContent = text || ""; };
  const announce = Obs.announce; // (view.js)

  // ------------------------------------------------------------------------------------------ runs
  async function loadRuns() {
    const gen = ++loadGen, ids = view.runs.slice();
    let got = [];
    if (ids.length) {
      try {
        const r = await fetch("/api/compare/?runs=" + ids.map(encodeURIComponent).join(","));
        const body = await r.json().catch(() => ({}));
        if (gen !== loadGen) return;
        if (r.status === 404 && Array.isArray(body.missing)) { // left out, and said so
          status(`No such run: ${body.missing.join(", ")}.`);
          keepStatus = true; // (the load of the others must not clear it)
          view.set({runs: ids.filter((id) => !body.missing.includes(id))});
          return;
        }
        if (!r.ok) { status(body.error || `The runs could not be read (HTTP ${r.status}).`); return; }
        got = body.runs;
        if (!keepStatus) status("");
        keepStatus = false;
      } catch (e) {
        if (gen === loadGen) status("The runs could not be read: " + e.message);
        return;
      }
    }
    const names = new Map(); // a name two runs share: label them by id too
    got.forEach((info) => names.set(info.name, (names.get(info.name) || 0) + 1));
    order = got.map((info, i) => {
      let line = lines.get(info.id);
      if (line) line.update(info);
      else lines.set(info.id, line = new Obs.RunLine(info, page.tokens_metric, onAxis));
      line.index = i;
      line.label = names.get(info.name) > 1 && info.name !== info.id
        ? `${info.name} (${info.id})` : info.name || info.id;
      return line;
    });
    for (const id of [...lines.keys()]) if (!order.some((l) => l.id === id)) lines.delete(id);
    if (order.length && !order.some((l) => l.supports(view.x))) view.x = "step"; // (no runs: kept until they come)
    order.forEach((l) => l.setMode(view.x));
    metricPicker.names = new Set(got.flatMap((info) => info.metrics.map((m) => m.name)));
    metricPicker.render();
    renderChips();
    runPicker.render();
    if (!charts.size && view.charts.length) syncCharts();
    else charts.forEach((ch) => ch.syncRuns());
    view.save();
    showControls();
    $("charts").dataset.runs = order.map((l) => l.id).join(",");
  }

  // A run's token count came in: in tokens mode its lines move (and a zoomed window maps to other steps).
  function onAxis() {
    if (view.x !== "tokens") return;
    redrawAll();
    if (view.range) charts.forEach((ch) => ch.setRange());
  }

  function addRun(id) {
    if (view.runs.includes(id)) return;
    if (view.runs.length >= page.max_runs) { Obs.toast(`At most ${page.max_runs} runs compare at once.`,
      "warning"); return; }
    view.set({runs: [...view.runs, id]});
    announce(`Run ${(listed.get(id) || {}).name || id} added`);
  }

  function renderChips() {
    const ul = $("run-chips");
    ul.replaceChildren(...order.map((line) => {
      const say = `Remove ${line.label} from the comparison`, el = Obs.el;
      const sw = el("span", {class: "swatch", attrs: {"aria-hidden": "true"}});
      sw.style.background = Obs.lineColor(line.index); // (plot.js: the palette of every line chart)
      return el("li", {class: "run-chip", "data-run": line.id}, sw,
        el("a", {text: line.label, href: "/runs/" + encodeURIComponent(line.id) + "/"}),
        line.label !== line.id && el("span", {class: "muted run-id", text: line.id}),
        el("span", {class: "badge state-" + line.info.state, text: line.info.state}),
        imported(line.info.source) && el("span", {class: "badge", text: "imported"}),
        el("button", {class: "remove", text: "✕", type: "button", title: say, attrs: {"aria-label": say},
                      on: {click: () => {
                        view.set({runs: view.runs.filter((id) => id !== line.id)});
                        $("run-search").focus();
                        announce(`Run ${line.label} removed`);
                      }}}));
    }));
    $("runs-empty").hidden = order.length > 0 || view.runs.length > 0;
  }

  // The run picker: every run the site has (name, id, state, imported), searchable; the chosen ones disabled.
  const runPicker = new Obs.Picker({info: (id) => {
    const r = listed.get(id) || {name: id, state: "", source: ""};
    return {name: id, title: [r.name || id, r.state,
      imported(r.source) ? "imported" : ""].filter(Boolean).join(" · "),
            group: imported(r.source) ? "Imported" : "Streamed"};
  }}, (id) => view.runs.includes(id), addRun, {prefix: "run", noun: "runs"});

  async function listRuns() {
    try {
      const r = await fetch("/api/runs/?limit=1000");
      if (!r.ok) throw new Error("HTTP " + r.status);
      for (const run of (await r.json()).runs) listed.set(run.id, run);
      runPicker.discover([...listed.keys()]);
    } catch (e) {
      console.warn("run list:", e);
    }
  }

  // ------------------------------------------------------------------------------------------ charts
  const metricPicker = Obs.chartPicker(registry, view, charts);

  function syncCharts() {
    for (const [id, ch] of charts) {
      if (view.charts.includes(id)) continue;
      ch.destroy(); charts.delete(id);
    }
    for (const id of view.charts) {
      let ch = charts.get(id);
      if (!ch) charts.set(id, ch = new Obs.CompareChart(ctx, id, $("charts")));
      $("charts").appendChild(ch.box); // in view order
    }
    $("charts-empty").hidden = view.charts.length > 0;
    metricPicker.render();
    schedule();
  }

  function chartAction(id, action) { Obs.moveChart(view, charts, id, action, registry.info(id).title); }

  // A visible x range (the axis's units; null: everything), from a chart, the range fields or the URL.
  function zoomTo(range) {
    range = Obs.wholeRange(range);
    const cur = view.range;
    if ((!range && !cur) || (range && cur && range[0] === cur[0] && range[1] === cur[1])) return;
    view.set({range});
  }

  // ------------------------------------------------------------------------------------------ controls
  const X_WHY = {tokens: "no run here publishes a token count", time: "no run here has timestamps"};
  function showControls() {
    showView(view.x, (mode) => (order.length && !order.some((l) => l.supports(mode)) ? X_WHY[mode] : ""));
    $("logx").setAttribute("aria-pressed", String(view.logx));
    $("range-unit").textContent = {step: "steps", tokens: "tokens", time: "seconds since each start"}[view.x];
  }

  view.onChange((keys) => {
    if (keys.includes("runs")) { loadRuns(); runPicker.render(); }
    if (keys.includes("charts")) syncCharts();
    if (keys.includes("x")) { order.forEach((l) => l.setMode(view.x)); redrawAll(); }
    if (keys.includes("logx")) charts.forEach((ch) => { ch.rangeRev++; }); // a new axis type
    if (["log", "smooth", "logx"].some((k) => keys.includes(k))) redrawAll();
    if (keys.includes("range")) charts.forEach((ch) => ch.setRange());
    showControls();
  });

  function wireControls() {
    $("logx").addEventListener("click", () => view.toggleLogX());
    const pickX = (x) => { if (x !== view.x) view.set({x, range: null}); }; // a range in steps means nothing in tokens
    showView = Obs.viewControls(view, zoomTo, parseFloat,
                                "Enter where the view starts and ends, the end after the start.", pickX);
    document.addEventListener("obs-theme", () => { renderChips(); redrawAll(); });
  }

  wireControls();
  showControls();
  listRuns();
  loadRuns().then(() => { if (!charts.size) syncCharts(); });
})();
