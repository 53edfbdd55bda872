// Anomalies on the run dashboard: the run's anomaly log from the JSON API at start, then live "anomaly" frames
// (webapp/live/protocol.py). Each warning/critical anomaly is a marker on the chart of its metric (a band once it
// has closed) through Obs.setOverlays, a new one also a toast; a panel lists the latest with links to the full log.
// The log's "chart" links open the dashboard at `?from=S&to=E`: every chart zoomed on the anomaly.
"use strict";

(function (Obs) {
  const SOURCE = "anomalies";
  const PANEL_ROWS = 12;
  const COLORS = {critical: {band: "rgba(229,57,53,0.16)", line: "#e53935", text: "#b71c1c"},
                  warning: {band: "rgba(249,168,37,0.20)", line: "#f9a825", text: "#8d5a00"}};
  const byKey = new Map(); // key -> record (superseded ones are dropped)
  let page = null, ctx = null, logUrl = "";

  const label = (a) => a.kind.replace(/_/g, " ");
  const hover = (a) => `step ${a.start_step} · ${a.severity}: ${label(a)}` +
    (a.explanation ? " — " + a.explanation : "");

  // The line chart showing a metric: the default charts' own and optional series, or a per-domain series under
  // a chart's prefix; anything else (router loads, step time, the heartbeat) is marked on the loss chart.
  function chartMetric(metric) {
    const charts = page.charts || [];
    for (const spec of charts) {
      if ((spec.metrics || []).includes(metric) || (spec.optional || []).includes(metric)) return metric;
      const p = spec.extra_prefix;
      if (p && metric.startsWith(p) && metric.length > p.length && !metric.slice(p.length).includes("/")) return metric;
    }
    return charts.length ? charts[0].metrics[0] : undefined;
  }

  function overlays() {
    const out = new Map(); // one mark per chart and step: episodes starting together share a label
    for (const a of byKey.values()) {
      const c = COLORS[a.severity];
      if (!c) continue; // info: listed, not drawn
      const metric = chartMetric(a.metric);
      const closed = a.end_step !== null && a.end_step > a.start_step;
      const at = metric + "@" + a.start_step;
      const same = out.get(at);
      if (same) {
        if (!same.label.includes(label(a))) same.label += ", " + label(a);
        same.hover.push(hover(a));
        if (a.severity === "critical") Object.assign(same, {color: closed ? c.band : c.line, textColor: c.text});
        if (closed && (same.x1 === undefined || a.end_step > same.x1)) same.x1 = a.end_step;
        continue;
      }
      out.set(at, {id: "anomaly-" + a.id, x0: a.start_step, x1: closed ? a.end_step : undefined, metric,
                   label: "⚠ " + label(a), hover: [hover(a)], color: closed ? c.band : c.line, textColor: c.text,
                   collapse: true,
                   onClick: () => { location.href = logUrl + "#a-" + a.id; }});
    }
    return [...out.values()];
  }

  // ------------------------------------------------------------------------------------------ panel
  function panel() {
    let box = document.getElementById("anomaly-panel");
    if (box) return box;
    box = document.createElement("section");
    box.id = "anomaly-panel";
    box.className = "panel anomalies";
    box.innerHTML = '<h2>Anomalies <span class="muted count"></span><a class="more" href="">full log →</a></h2>' +
      '<ol class="anomaly-list"></ol><p class="empty">None so far.</p>';
    box.querySelector("a.more").href = logUrl;
    const anchor = document.querySelector("section.events") || document.getElementById("charts");
    anchor.parentNode.insertBefore(box, anchor);
    return box;
  }

  // Anomaly frames come in bursts (a divergence trips many detectors; frames between steps): the panel and the
  // charts' marks are made again at most once an animation frame, from all that came (a hidden tab: on its return).
  let renderQueued = false;
  function render() {
    if (renderQueued) return;
    renderQueued = true;
    requestAnimationFrame(() => { renderQueued = false; renderNow(); });
  }

  function renderNow() {
    const box = panel();
    const list = box.querySelector(".anomaly-list");
    const all = [...byKey.values()].sort((a, b) => b.start_step - a.start_step || b.id - a.id);
    const open = all.filter((a) => a.end_step === null).length;
    box.querySelector(".count").textContent = all.length ? `${all.length} · ${open} ongoing` : "";
    box.querySelector(".empty").hidden = all.length > 0;
    list.replaceChildren(...all.slice(0, PANEL_ROWS).map((a) => {
      const li = document.createElement("li");
      li.className = "sev-" + a.severity;
      li.dataset.key = a.key;
      const sev = document.createElement("span");
      sev.className = "badge sev-" + a.severity; sev.textContent = a.severity;
      const what = document.createElement("a");
      what.href = logUrl + "#a-" + a.id;
      what.textContent = `${label(a)}${a.metric ? " · " + a.metric : ""}`;
      const steps = document.createElement("button");
      steps.type = "button"; steps.className = "link steps";
      steps.title = "zoom the charts on it";
      steps.textContent = "step " + a.start_step + (a.end_step === null ? " (ongoing)" : "–" + a.end_step);
      steps.addEventListener("click", () => zoom(a.zoom.from, a.zoom.to));
      const why = document.createElement("div");
      why.className = "muted why"; why.textContent = a.explanation;
      li.append(sev, " ", what, " ", steps, why);
      return li;
    }));
    Obs.setOverlays(SOURCE, overlays());
    if (ctx) ctx.schedule();
  }

  // ------------------------------------------------------------------------------------------ updates
  const TOASTS_PER_FRAME = 2; // more new anomalies at once (a divergence trips many detectors): one summary toast

  function upsert(list, live) {
    const news = [];
    for (const a of list) {
      const old = byKey.get(a.key);
      if (a.superseded) { byKey.delete(a.key); continue; }
      byKey.set(a.key, a);
      const escalated = old && old.severity !== a.severity && a.severity === "critical";
      if (live && COLORS[a.severity] && (a.event === "opened" || escalated)) news.push(a);
    }
    const text = (a) => `${a.severity === "critical" ? "Critical" : "Warning"}: ${label(a)}` +
      `${a.metric ? " on " + a.metric : ""} at step ${a.start_step}: ${a.explanation}`;
    if (news.length > TOASTS_PER_FRAME) {
      const worst = news.find((a) => a.severity === "critical") || news[0];
      const kinds = new Map();
      for (const a of news) kinds.set(label(a), (kinds.get(label(a)) || 0) + 1);
      const what = [...kinds].map(([k, n]) => (n > 1 ? `${k} ×${n}` : k)).join(", ");
      Obs.toast(`${news.length} new anomalies (${what}). ${text(worst)}`, worst.severity);
    } else {
      for (const a of news) Obs.toast(text(a), a.severity);
    }
    render();
  }

  Obs.frameHandlers.anomaly = (frame, c) => { ctx = c; upsert(frame.anomalies || [], true); };

  // ------------------------------------------------------------------------------------------ zoom
  // The dashboard's own zoom (Obs.zoomTo: every chart, the URL's from/to) when it has one; else a relayout of
  // every chart, as if the user had zoomed (so that later redraws keep it).
  function zoom(from, to) {
    if (!(to > from)) return;
    if (Obs.zoomTo) { Obs.zoomTo(from, to); return; }
    const relayout = Plotly._guiRelayout || Plotly.relayout;
    document.querySelectorAll("#charts .chart .plot").forEach((el) => {
      relayout(el, {"xaxis.range": [from, to], "xaxis.autorange": false});
    });
  }

  function zoomFromUrl() {
    if (Obs.zoomTo) return; // the dashboard reads ?from=&to= itself
    const q = new URLSearchParams(location.search);
    const from = parseInt(q.get("from"), 10), to = parseInt(q.get("to"), 10);
    if (Number.isFinite(from) && Number.isFinite(to)) zoom(from, to);
  }

  Obs.onStart.push(async (c, p) => {
    ctx = c; page = p;
    const base = "/runs/" + encodeURIComponent(p.run_id);
    logUrl = base + "/anomalies/";
    panel();
    zoomFromUrl();
    try {
      const r = await fetch("/api" + base + "/anomalies/?limit=500");
      if (!r.ok) throw new Error("HTTP " + r.status);
      const body = await r.json();
      // frames that arrived meanwhile are newer than this answer: keep them
      const seen = new Set(byKey.keys());
      upsert((body.anomalies || []).filter((a) => !seen.has(a.key)), false);
    } catch (e) {
      console.warn("anomalies:", e);
      render();
    }
  });
})(window.Obs);
