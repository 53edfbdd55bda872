// The run header: lifecycle state, phase and health badges, step, heartbeat age, and progress — tokens trained of
// the budget, the data stage, steps/s and the ETA from the latest heartbeat (counting down between heartbeats).
// Its figures are written together once a second (its clock), not at every live frame: a header text's change lays
// out and repaints the header and layerizes the page again (most of a live update's style, layout and paint). The
// step is written at once after a quiet second (a slow run's shows as it comes), else at the next tick: <= 1 s late.
// A tick's writes wait for the next live update (show()) and go with it, into the frame its charts draw in: a tick
// of its own rendered a frame of its own (style, layout, paint, the compositor's commit), and the live update it fell
// in was the window's slowest. With no live update within ALONE_MS they are written alone.
"use strict";

(function (Obs) {
  const $ = (id) => document.getElementById(id);
  const num = (v) => (typeof v === "number" && Number.isFinite(v) ? v : null);
  const FIGURES_MS = 1000; // the clock: the figures' writes at most this often
  const ALONE_MS = 400; // a tick's figures wait this long for a live update to go with

  class RunHeader {
    // stage(): the data stage's label ("pretrain (1 of 2)") or null, from the data panel.
    constructor(stage) {
      this.stage = stage;
      this.run = null; this.progress = {}; this.progressAt = null; this.heartbeatAt = null;
      this.step = null; this.stepAt = -Infinity; this.clock = null; this.dueAt = null;
    }

    // A run summary (API detail, hello/update frames) or a detail's heartbeat.
    show(run) {
      if (!run) return;
      this.run = run;
      const p = run.progress || run.heartbeat;
      if (p) { this.progress = p; this.progressAt = Date.now(); }
      if (run.last_heartbeat_at) this.heartbeatAt = new Date(run.last_heartbeat_at);
      const st = $("badge-state"); Obs.put(st, run.state); Obs.putClass(st, "badge state-" + run.state);
      Obs.put($("badge-phase"), run.phase || "–");
      Obs.putHidden($("badge-phase"), !run.phase || run.phase === run.state); // (the heartbeat's, when it says more)
      const h = $("badge-health"); Obs.put(h, run.health); Obs.putClass(h, "badge health-" + run.health);
      if (run.last_step != null) this.step = run.last_step;
      if (!this.clock) { // (the first run: every figure at once, then every second)
        this.clock = setInterval(() => this.due(), FIGURES_MS);
        this.tick();
      } else if (this.dueAt !== null) this.tick(); // (the clock's figures, with this update's)
      else if (performance.now() - this.stepAt >= FIGURES_MS) this.putStep();
    }

    // The clock: the figures are due, written with the next live update (show) or alone after ALONE_MS.
    due() {
      const at = this.dueAt = performance.now();
      setTimeout(() => { if (this.dueAt === at) this.tick(); }, ALONE_MS);
    }

    putStep() {
      if (this.step === null || $("stat-step").textContent === String(this.step)) return;
      Obs.putFigure($("stat-step"), this.step);
      this.stepAt = performance.now();
    }

    // Every second: the newest step, heartbeat age, ETA counting down from the last heartbeat's estimate, progress.
    tick() {
      this.dueAt = null;
      this.putStep();
      Obs.putFigure($("stat-heartbeat"), this.heartbeatAt
        ? Obs.duration((Date.now() - this.heartbeatAt.getTime()) / 1000) + " ago" : "–");
      const p = this.progress || {};
      const tokens = num(p.tokens), budget = num(p.token_budget);
      const frac = tokens !== null && budget ? Math.min(1, tokens / budget) : null;
      const bar = $("run-progress");
      Obs.putHidden(bar, frac === null);
      if (frac === null) Obs.putFigure($("stat-tokens"), tokens !== null ? Obs.count(tokens) : "–");
      else {
        const pct = Math.round(frac * 1000) / 10;
        if (bar.value !== pct) bar.value = pct;
        Obs.put(bar, Obs.percent(frac));
        Obs.putFigure($("stat-tokens"), `${Obs.count(tokens)} of ${Obs.count(budget)} (${Obs.percent(frac)})`);
      }
      const sps = num(p.steps_per_s), heard = this.run && Obs.heard(this.run);
      // a paused trainer's heartbeat still carries the rate it had before the pause: no speed to show
      const paused = heard && (this.run.state === "paused" || this.run.phase === "paused");
      Obs.put($("stat-rate"), !heard ? "–" : paused ? "paused" : sps === null || sps <= 0 ? "–"
        : sps >= 10 ? sps.toFixed(0) + " steps/s" : sps.toFixed(2) + " steps/s");
      let eta = num(p.eta_s);
      if (eta !== null && this.progressAt && this.run && this.run.state === "training") {
        eta = Math.max(0, eta - (Date.now() - this.progressAt) / 1000);
      }
      Obs.put($("stat-eta"), this.run ? Obs.timeLeft(this.run, frac, eta) : "–");
      Obs.put($("stat-stage"), this.stage() || "–");
    }
  }

  Obs.RunHeader = RunHeader;
})(window.Obs);
