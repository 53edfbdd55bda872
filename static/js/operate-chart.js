// The operator panel's chart (static/js/operate.js): the selected run's loss and learning rate, the commands
// applied to it (vertical lines), and the preview of the command being written (a rollback's superseded steps, a
// token budget's new LR plan). Obs.operateChart(ctx) -> the chart's state, with load() and draw();
// ctx: {page, $, num, runOf(id), commands()}: the page's data, its helpers, and the snapshot's commands.
"use strict";

window.Obs = window.Obs || {};
(function () {
  const MODEBAR_PX = 230; // the width of Plotly's default mode bar, top right of the chart
  const enc = encodeURIComponent;

  Obs.operateChart = function (ctx) {
    const {$, num} = ctx;
    const chart = {run: null, series: {}, preview: null, drawn: false};

    async function load() {
      const runId = chart.run;
      if (!runId) return;
      if (!chart.known || chart.known.run !== runId || chart.known.names.size < Object.keys(ctx.page.metrics).length) {
        // ask which series exist first: a series not stored yet is not an error to show in the console
        try {
          const list = await (await fetch(`/api/runs/${enc(runId)}/metrics/`)).json();
          chart.known = {run: runId, names: new Set(list.metrics.map((m) => m.name))};
        } catch (e) { return; }
      }
      const wanted = Object.entries(ctx.page.metrics).filter(([, name]) => chart.known.names.has(name));
      await Promise.all(wanted.map(async ([key, name]) => {
        try {
          // up to the trainer's step: points past it belong to a branch a rollback abandoned (not yet overwritten)
          const step = (ctx.runOf(runId) || {}).step;
          const end = Number.isInteger(step) && step > 0 ? `&end=${step}` : "";
          const r = await fetch(`/api/runs/${enc(runId)}/metrics/${name}/?points=400${end}`);
          if (r.ok && chart.run === runId) chart.series[key] = await r.json();
        } catch (e) { /* next round */ }
      }));
      draw();
    }

    function draw() {
      const run = ctx.runOf(chart.run);
      if (!run || $("op-detail").hidden) return;
      const s = chart.series, p = chart.preview || {}, traces = [], shapes = [], annotations = [];
      const line = (x, y, name, style, y2) => ({x, y, name, mode: "lines", yaxis: y2 ? "y2" : "y", line: style});
      const xs = (c) => c.map((q) => q[0]), ys = (c) => c.map((q) => q[1]);
      if (s.loss) traces.push(line(s.loss.steps, s.loss.values, "loss", {width: 1.3, color: "#1f5fbf"}));
      if (s.lr) traces.push(line(s.lr.steps, s.lr.values, "learning rate", {width: 1.3, color: "#e07b00"}, true));
      if (p.plan) { // set-token-budget: the schedule now and after, on the LR axis
        traces.push(line(xs(p.plan.curve_old), ys(p.plan.curve_old), "plan now", {dash: "dot", color: "#9e9e9e"},
                         true));
        traces.push(line(xs(p.plan.curve_new), ys(p.plan.curve_new), "plan after", {dash: "dash", color: "#2e7d32"},
                         true));
      }
      if (p.band) { // rollback: the steps it supersedes
        shapes.push({type: "rect", xref: "x", yref: "paper", x0: p.band[0], x1: p.band[1], y0: 0, y1: 1,
                     fillcolor: "rgba(198,40,40,0.15)", line: {width: 0}});
        annotations.push({xref: "x", yref: "paper", x: p.band[0], y: 1, yanchor: "bottom", xanchor: "left",
                          showarrow: false, text: "superseded", font: {size: 10, color: "#c62828"}});
      }
      ctx.commands().filter((c) => c.run === run.id && c.outcome === "applied" && c.step != null).forEach((c) =>
        shapes.push({type: "line", xref: "x", yref: "paper", x0: c.step, x1: c.step, y0: 0, y1: 1,
                     line: {color: "#6a1b9a", width: 1}}));
      const css = getComputedStyle(document.documentElement), v = (name) => css.getPropertyValue(name).trim();
      const axis = {gridcolor: v("--grid"), zerolinecolor: v("--line")};
      // The legend's rows sit above the plot; where they reach under the mode bar (top right, ~230 px: a phone),
      // the legend moves down below it instead of under it.
      const width = $("op-chart").clientWidth || 600;
      const legendW = traces.reduce((a, t) => a + 44 + 6 * t.name.length, 0);
      const rows = Math.max(1, Math.ceil(legendW / Math.max(200, width - 110)));
      const top = 28 + 24 * (rows - 1) + (rows > 1 || 50 + legendW > width - MODEBAR_PX ? 36 : 0);
      const layout = {margin: {l: 50, r: 60, t: top, b: 36}, uirevision: run.id, showlegend: true, shapes, annotations,
                      paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)", font: {color: v("--fg")},
                      legend: {orientation: "h", x: 0, y: 1.02, yanchor: "bottom"},
                      xaxis: {...axis, title: {text: "step"}},
                      yaxis: {...axis, title: {text: "loss"}},
                      // its own round ticks (synced to the loss axis they were fractions of its range, one of them
                      // float noise near 0: "9.53e−20"), formatted by Plotly, which rounds each to the tick spacing
                      yaxis2: {overlaying: "y", side: "right", tickmode: "auto", exponentformat: "e", showgrid: false,
                               rangemode: "tozero", title: {text: "LR"}}};
      Plotly.react($("op-chart"), traces, layout, {displaylogo: false, responsive: true});
      $("op-chart-note").textContent = s.loss ? `${num(s.loss.count)} steps stored`
        : chart.known && chart.known.run === run.id ? "no data yet" : "loading…";
    }

    chart.load = load;
    chart.draw = draw;
    return chart;
  };
})();
