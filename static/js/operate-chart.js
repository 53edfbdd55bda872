// The operator panel's chart (static/js/operate.js), drawn by the one line renderer (plot.js over uPlot): the
// selected run's loss and learning rate (right axis), the commands applied to it (vertical lines), and the preview
// of the command being written (a rollback's superseded steps, a token budget's new LR plan).
// Obs.operateChart(ctx) -> the chart's state, with load() and draw();
// ctx: {page, $, num, runOf(id), commands()}: the page's data, its helpers, and the snapshot's commands.
"use strict";

window.Obs = window.Obs || {};
(function () {
  const enc = encodeURIComponent;

  Obs.operateChart = function (ctx) {
    const {$, num} = ctx;
    const chart = {run: null, series: {}, preview: null};

    async function load() {
      const runId = chart.run;
      if (!runId) return;
      // up to the trainer's step: points past it belong to a branch a rollback abandoned (not yet overwritten)
      const step = (ctx.runOf(runId) || {}).step;
      const end = Number.isInteger(step) && step > 0 ? `&end=${step}` : "";
      const names = Object.entries(ctx.page.metrics); // [key, series name]
      try { // one request for both; a series not stored yet answers null (not a 404 in the console)
        const r = await fetch(`/api/runs/${enc(runId)}/windows/?points=400${end}&series=` +
                              names.map(([, name]) => enc(name)).join(","));
        if (!r.ok || chart.run !== runId) return;
        const got = (await r.json()).windows;
        for (const [key, name] of names) if (got[name]) chart.series[key] = got[name];
        chart.known = runId;
      } catch (e) { return; } // next round
      draw();
    }

    function draw() {
      const run = ctx.runOf(chart.run);
      if (!run || $("op-detail").hidden) return;
      const s = chart.series, p = chart.preview || {}, traces = [], shapes = [], annotations = [];
      const line = (x, y, name, color, lr, dash) => traces.push({x, y, name, mode: "lines", yaxis: lr ? "y3" : "y",
                                                                 line: {width: 1.3, color, dash}});
      if (s.loss) line(s.loss.steps, s.loss.values, "loss", "#1f5fbf");
      if (s.lr) line(s.lr.steps, s.lr.values, "learning rate", "#e07b00", true);
      if (p.plan) { // set-token-budget: the schedule now and after, on the LR axis
        const xy = (c) => [c.map((q) => q[0]), c.map((q) => q[1])];
        line(...xy(p.plan.curve_old), "plan now", "#9e9e9e", true, "dot");
        line(...xy(p.plan.curve_new), "plan after", "#2e7d32", true, "dash");
      }
      if (p.band) { // rollback: the steps it supersedes
        shapes.push({type: "rect", x0: p.band[0], x1: p.band[1], fillcolor: "rgba(198,40,40,0.15)"});
        annotations.push({x: p.band[0], text: "superseded", font: {color: "var(--red, #c62828)"}});
      }
      ctx.commands().filter((c) => c.run === run.id && c.outcome === "applied" && c.step != null).forEach((c) =>
        shapes.push({type: "line", x0: c.step, x1: c.step, line: {color: "#6a1b9a", width: 1}}));
      // The legend's rows sit above the plot, left of the tool bar (a phone: several rows)
      const rows = Math.max(1, Obs.legendRows(traces.map((t) => t.name), $("op-chart").clientWidth || 600));
      Obs.drawFigure($("op-chart"), traces, {
        margin: {l: 50, r: 56, t: 20 + 16 * rows, b: 36}, showlegend: true, shapes, annotations, hovermode: "x",
        dragmode: false, xaxis: {title: {text: "step"}}, yaxis: {}, yaxis3: {title: {text: "LR"}}},
        {toolbar: [Obs.PNG_TOOL], toolbarLabel: "Chart tools: the run's loss and learning rate"});
      $("op-chart-note").textContent = s.loss ? `${num(s.loss.count)} steps stored`
        : chart.known === run.id ? "no data yet" : "loading…";
    }

    chart.load = load;
    chart.draw = draw;
    return chart;
  };
})();
