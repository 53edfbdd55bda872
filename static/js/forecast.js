// The run's pre-registered loss forecast on the dashboard (webapp/experiments; docs/SCALING.md "On the dashboard").
// When the run published one (GET /api/runs/<id>/forecast/, 404 otherwise), the loss charts (train/loss, eval/loss)
// draw its band — the frozen curve's low/high filled, the forecast itself dashed — and the ladder's rung runs as
// faint lines, all placed by tokens (the forecast is a curve over tokens; on the step and wall-time axes tokens
// become steps at this run's tokens per step: batch × sequence length from its config, else its token count).
// A panel compares the forecast final loss with a live extrapolation: the forecast curve scaled by the ratio of the
// live loss (eval/loss when the run has it, else the smoothed train/loss) to the forecast at the same tokens. The
// curve is a final-loss envelope, so while the learning rate still decays that ratio, and the extrapolation, run
// high: the panel says so; once the target finished it shows the actual final loss and the verdict instead (the
// API's `outcome`). The band is drawn on eval/loss (held out, clear); on train/loss only while the run has no
// eval/loss point. An unverified registration is drawn dashed and labelled, never as a trusted forecast.
"use strict";

(function (Obs) {
  const SOURCE = "forecast";
  let TRAIN = null, EVAL = null, CHARTS = new Set(); // the loss series it is drawn on: page.loss_metrics (contract)
  const SMOOTH = 0.9; // EMA retention of the live train loss for the extrapolation (the dashboard's smoothing scale)
  const BAND = {fill: "rgba(46,125,50,0.16)", line: "#2e7d32", bad: "rgba(229,57,53,0.14)", badLine: "#c62828"};
  const ENDED = new Set(["stopped", "failed"]); // runs/models.py ENDED_STATES
  const F = {data: null, ctx: null, page: null, rungs: new Map(), panel: null, timer: null, tokens: null,
    live: new Map()};

  const fmt = (v, d = 4) => (Number.isFinite(v) ? Number(v).toPrecision(d).replace(/\.?0+(e|$)/, "$1") : "–");
  const tokensFmt = (v) => (Number.isFinite(v) ? Number(v).toExponential(2).replace("e+", "e") : "–");

  function interpLog(xs, ys, x) { // linear in log tokens, flat beyond the ends (as Forecast.at)
    if (x <= xs[0]) return ys[0];
    if (x >= xs[xs.length - 1]) return ys[ys.length - 1];
    const j = Obs.lowerBound(xs, x), a = Math.log(xs[j - 1]), b = Math.log(xs[j]);
    const w = b > a ? (Math.log(x) - a) / (b - a) : 1;
    return ys[j - 1] + w * (ys[j] - ys[j - 1]);
  }

  // This run's tokens per step: the config's, else the slope of its token-count series.
  function tps() {
    if (F.data.tokens_per_step) return F.data.tokens_per_step;
    const s = F.tokens;
    if (s && s.steps.length && s.steps[s.steps.length - 1] > 0) {
      return s.values[s.values.length - 1] / s.steps[s.steps.length - 1];
    }
    return null;
  }

  // tokens -> the chart's x (null when the run's tokens per step is unknown and the axis is not tokens)
  function xOf(tokens) {
    const xa = F.ctx.xaxis;
    if (xa.mode === "tokens") return tokens.slice();
    const k = tps();
    return k ? xa.toX(tokens.map((t) => t / k)) : null;
  }

  function liveMax(chart) {
    let hi = -Infinity;
    for (const it of chart.items) for (const v of (it.series && it.series.values) || []) if (v > hi) hi = v;
    return hi;
  }

  // The band goes on the held-out loss, where it reads clearly; on the noisy train loss only while the run has no
  // eval/loss point (a run without evaluations, or before its first).
  function hasEval() { const ev = F.live.get(EVAL); return !!(ev && ev.steps.length); }
  function drawsOn(id) { return id === EVAL || (id === TRAIN && !hasEval()); }

  function traces(chart) {
    if (!F.data || !CHARTS.has(chart.id) || !drawsOn(chart.id)) return null;
    const reg = F.data.registration, c = reg.forecast && reg.forecast.curve;
    if (!c || !Array.isArray(c.tokens)) return null;
    const ok = F.data.verified, hero = reg.forecast.hero || {};
    const high = c.high || c.loss, low = c.low || c.loss;
    // the law diverges as tokens → 0: draw the curve where it is no higher than the chart's own data reaches
    const cap = Math.max(liveMax(chart), hero.high || hero.loss || 0) * 1.1;
    const pick = (arr) => arr.filter((_, i) => high[i] <= cap);
    const tokens = pick(c.tokens), x = xOf(tokens);
    if (!x || !tokens.length) return null;
    const label = ok ? "forecast" : "forecast (UNVERIFIED)", color = ok ? BAND.line : BAND.badLine;
    const band = (y, name, meta, more) => ({x: x.slice(), y, customdata: tokens, mode: "lines", name, yaxis: "y",
                                             showlegend: false, line: {width: 0, color}, meta, ...more});
    const fill = {fill: "tonexty", fillcolor: ok ? BAND.fill : BAND.bad}, dash = ok ? "dash" : "dot";
    const out = [band(pick(low), label + " low", "forecast-low", {hoverinfo: "skip"}),
                 band(pick(high), label + " band", "forecast-high", fill),
                 band(pick(c.loss), label, "forecast", {showlegend: true, line: {width: 1.3, dash, color}})];
    for (const r of F.data.rungs) {
      const d = F.rungs.get(r.id + " " + chart.id);
      if (!d || !d.steps.length) continue;
      const rx = xOf(d.steps.map((s) => s * r.tokens_per_step));
      if (!rx) continue;
      out.push({x: rx, y: d.values.slice(), mode: "lines", name: "rung " + r.name, yaxis: "y", opacity: 0.35,
                showlegend: false, meta: "rung", line: {width: 1, color: Obs.theme().muted}});
    }
    return out;
  }

  // ---------------------------------------------------------------------------------------- the panel
  function live() { // [tokens, loss, source] of the newest live loss, or null
    const ev = F.live.get(EVAL), tr = F.live.get(TRAIN), k = tps();
    if (!k) return null;
    if (ev && ev.steps.length) {
      const i = ev.steps.length - 1;
      return [ev.steps[i] * k, ev.values[i], "eval loss"];
    }
    if (tr && tr.steps.length) {
      const y = Obs.ema(tr.values, SMOOTH);
      return [tr.steps[tr.steps.length - 1] * k, y[y.length - 1], "smoothed train loss"];
    }
    return null;
  }

  function renderPanel() {
    F.timer = null;
    const reg = F.data.registration, fc = reg.forecast || {}, hero = fc.hero || {}, c = fc.curve || {};
    const q = (s) => F.panel.querySelector(s);
    const band = Number.isFinite(hero.low) ? ` [${fmt(hero.low)}, ${fmt(hero.high)}]` : "";
    let extra = "–", how = "waiting for live points";
    const now = live(), out = F.data.outcome || {}, ended = ENDED.has(F.ctx.runState);
    q(".fc-vs").textContent = out.status === "finished" ? "vs actual" : "vs live extrapolation";
    if (out.status === "finished") { // the target finished: the verdict, never an extrapolation
      extra = fmt(out.actual);
      how = `${out.verdict}, error ${out.error_pct >= 0 ? "+" : ""}${fmt(out.error_pct, 3)}% (${out.source})`;
    } else if (ended) {
      extra = fmt(out.actual);
      how = out.status === "short" ? "the run stopped short of its token budget: no verdict" :
        "the run has ended: the verdict is on the experiment page";
    } else if (now && Array.isArray(c.tokens) && now[0] >= c.tokens[0]) {
      const [t, y, src] = now, at = interpLog(c.tokens, c.loss, t);
      extra = fmt(hero.loss * y / at);
      how = `the forecast curve scaled by the ${src} ${fmt(y)} over the forecast ${fmt(at)} at ${tokensFmt(t)} ` +
            `tokens; it runs high until the learning rate has decayed`;
    }
    q(".fc-forecast").textContent = fmt(hero.loss) + band;
    q(".fc-live").textContent = extra;
    q(".fc-how").textContent = how;
  }

  const retrace = () => { Obs.setTraces(SOURCE, traces); F.ctx.schedule(); };
  let hadEval = false;
  function evalSeen() { // the first eval/loss point moves the band from the train loss to the held-out loss
    if (hasEval() !== hadEval) { hadEval = hasEval(); retrace(); }
    schedulePanel();
  }

  function schedulePanel() { if (F.panel && !F.timer) F.timer = setTimeout(renderPanel, 300); }

  function buildPanel() {
    const d = F.data, reg = d.registration, exp = reg.experiment || {}, el = Obs.el;
    const created = Number.isFinite(reg.created_at) ? Obs.utc(reg.created_at * 1000) : "?";
    const meta = `${(reg.forecast || {}).law || "?"} law · sha256 ${String(reg.sha256 || "").slice(0, 16)}… · ` +
      `registered ${created}` + (d.registered_before_start ? `, before step 0 of ${d.run_id}` :
        d.registered_before_start === false ? `, AFTER ${d.run_id} first started: not a pre-registration` : "") +
      ` · ${d.rungs.length} rung run(s) drawn faint`;
    F.panel = el("section", {class: "panel forecast", id: "forecast-panel",
                             attrs: {"aria-labelledby": "forecast-title"}},
      el("h2", {id: "forecast-title"}, "Pre-registered forecast ",
         el("a", {class: "fc-exp", href: d.experiment_url, text: exp.name || d.run_id}), " ",
         el("span", {class: "badge fc-badge" + (d.verified ? "" : " sev-warning"), title: d.verified ? undefined
                     : d.problem || "", text: d.verified ? "registration intact" : "registration not intact"})),
      el("p", {class: "fc-final"}, "final loss: forecast ", el("b", {class: "fc-forecast"}), " ",
         el("span", {class: "fc-vs", text: "vs live extrapolation"}), " ", el("b", {class: "fc-live"}), " ",
         el("span", {class: "muted fc-how"})),
      el("p", {class: "muted fc-meta", text: meta}));
    const charts = document.getElementById("charts");
    charts.parentNode.insertBefore(F.panel, charts);
  }

  // A rung's series, held as the charts hold theirs (an Obs.Store of that run's, history only: no socket); the band
  // is drawn again once it is in. Only series the rung has (the API lists them): no request for one it lacks.
  function loadRung(r, metric) {
    const key = r.id + " " + metric;
    if (F.rungs.has(key) || !CHARTS.has(metric) || !r.tokens_per_step) return;
    const store = new Obs.Store("/api/runs/" + encodeURIComponent(r.id), () => {});
    F.rungs.set(key, store.want(metric, {reset: retrace, added() {}}, {points: 500}));
  }

  // (Re)load the run's forecast: at start when the page says it has one, and when a `forecast` event arrives live
  // (the trainer publishes it at every start: the first one, or a new forecast, draws without a reload).
  async function load(ctx, page) {
    const resp = await fetch("/api/runs/" + encodeURIComponent(page.run_id) + "/forecast/");
    if (!resp.ok) { console.warn("forecast:", resp.status); return; }
    const data = await resp.json();
    if (F.data && F.data.registration.sha256 === data.registration.sha256 && F.data.verified === data.verified) {
      const was = (F.data.outcome || {}).status;
      if (was !== (data.outcome || {}).status) { F.data.outcome = data.outcome; renderPanel(); }
      return;
    }
    F.data = data;
    if (!F.live.size) {
      const watcher = {reset: evalSeen, added: evalSeen}; // the panel's own view of the live series
      for (const name of [TRAIN, EVAL]) F.live.set(name, ctx.store.want(name, watcher, {points: 1000}));
    }
    if (!F.data.tokens_per_step && !F.tokens) {
      F.tokens = ctx.store.want(page.tokens_metric, {reset: retrace, added: schedulePanel}, {points: 1000});
    }
    if (F.panel) F.panel.remove();
    buildPanel();
    renderPanel();
    retrace();
    for (const r of F.data.rungs) for (const m of r.series || []) loadRung(r, m);
  }

  Obs.onStart.push((ctx, page) => {
    F.ctx = ctx; F.page = page;
    ({train: TRAIN, eval: EVAL} = page.loss_metrics);
    CHARTS = new Set([TRAIN, EVAL]);
    if (page.forecast) load(ctx, page); // (none: the page says so, and no 404 lands in the console)
  });
  Obs.onEvents.push((list) => {
    if (!F.page) return; // the page's own history: onStart reads it
    const fresh = list.filter((e) => e.kind === "event" && e.name === "forecast");
    const ended = F.data && list.some((e) => e.kind === "state" && ENDED.has(e.name)); // the verdict may be in
    const changed = fresh.some((e) => !F.data || (e.payload || {}).sha256 !== F.data.registration.sha256);
    if (ended || changed) load(F.ctx, F.page);
  });
})(window.Obs);
