// The run's event log, readable: events grouped by kind with a filter per group, runs of routine checkpoints
// collapsed into one line, and restarts told as "resumed at step N" rather than as a rewind. It also classifies
// rewinds for the charts' markers (a restart's "resumed at N", a rollback's "↺ back to N").
"use strict";

(function (Obs) {
  const MAX_EVENTS = 2000;
  const GROUPS = [["lifecycle", "Lifecycle"], ["restart", "Restarts & rollbacks"], ["intervention", "Operator actions"],
                  ["checkpoint", "Checkpoints"], ["other", "Other"]];
  const INTERVENTIONS = new Set(["command", "lr_multiplier", "lr_replan", "mixture_changed", "fault_injected"]);
  const RESTARTS = new Set(["resumed", "rollback", "commands_rolled_back"]);

  const el = (tag, cls, text, ...kids) => Obs.el(tag, {class: cls || undefined, text}, ...kids);

  class EventLog {
    // section: the events <section>; onRewind({from_step, to_step, label}): a rewind the charts should mark.
    constructor(section, onRewind) {
      this.section = section;
      this.list = section.querySelector("#events");
      this.onRewind = onRewind;
      this.entries = []; // {id, group, text, step, t}
      this.lastId = 0;
      this.restarting = false; // between a (re)start and training: a rewind then is the restart's
      this.show = new Set(GROUPS.map((g) => g[0]));
      this.buildFilters();
    }

    buildFilters() {
      this.counts = new Map(GROUPS.map(([key]) => [key, el("span", "muted count", "")]));
      const toggle = (ev) => {
        if (ev.target.checked) this.show.add(ev.target.value); else this.show.delete(ev.target.value);
        this.render();
      };
      this.section.querySelector("#event-filters").replaceChildren(...GROUPS.map(([key, label]) => el("label", "filter",
        undefined, Obs.el("input", {type: "checkbox", checked: true, value: key, on: {change: toggle}}),
        " " + label + " ", this.counts.get(key))));
    }

    // Events in id order (history from the API, then live frames); already-seen ids are skipped.
    add(events) {
      const before = this.lastId;
      for (const ev of events) {
        if (ev.id <= this.lastId) continue;
        this.lastId = ev.id;
        this.entries.push(this.describe(ev));
      }
      if (this.entries.length > MAX_EVENTS) this.entries.splice(0, this.entries.length - MAX_EVENTS);
      if (this.lastId !== before) this.render();
    }

    describe(ev) {
      const p = ev.payload || {};
      const out = {id: ev.id, step: ev.step, t: ev.t, group: "other", text: ev.name, kind: ev.kind};
      if (ev.kind === "state") {
        out.group = ev.name === "checkpointing" ? "checkpoint" : "lifecycle";
        if (ev.name === "starting") {
          const again = this.entries.length > 0; // (an event before it: a restart)
          out.text = again ? "Restarting" : "Starting";
          if (again && !ev.step) out.step = null; // not "step 0": the restart has not restored yet
          this.restarting = true;
        } else {
          out.text = "State: " + ev.name + (p.detail ? " — " + p.detail : "");
          if (ev.name === "training" || ev.name === "stopped" || ev.name === "failed") this.restarting = false;
        }
      } else if (ev.kind === "rewind") {
        const from = p.from_step, to = p.to_step, redo = from > to;
        out.group = "restart";
        if (this.restarting) {
          out.text = `Resumed at step ${to}` + (redo ? ` (steps ${to + 1}–${from} are trained again)` : "");
          this.onRewind({from_step: from, to_step: to, label: `resumed at ${to}`, t: ev.t}); // a restart is marked
        } else {
          out.text = `Went back to step ${to}` + (redo ? ` (steps ${to + 1}–${from} superseded)` : "");
          if (redo) this.onRewind({from_step: from, to_step: to, label: `↺ back to ${to}`, t: ev.t});
        }
      } else if (RESTARTS.has(ev.name)) {
        out.group = "restart";
        out.text = ev.name === "resumed" ? `Resumed from the checkpoint of step ${p.from_checkpoint ?? ev.step}`
          : ev.name === "rollback"
            ? `Rolled back to step ${p.to_step}` + (p.skip_batches ? `, skipping ${p.skip_batches} batches` : "")
          : `${(p.ids || []).length} operator command(s) undone` + (p.detail ? ": " + p.detail : "");
        if (ev.name === "resumed") this.restarting = true;
      } else if (INTERVENTIONS.has(ev.name)) {
        out.group = "intervention";
        out.text = ev.name === "command" ? `Operator: ${p.command || "command"}` +
            (p.args && Object.keys(p.args).length ? " " + JSON.stringify(p.args) : "")
              + (p.reason ? ` — “${p.reason}”` : "")
          : ev.name === "lr_multiplier" ? `Learning-rate multiplier → ${p.multiplier ?? p.new ?? ""}`.trim()
          : ev.name === "lr_replan" ? "Learning-rate schedule re-planned for a new token budget"
          : ev.name === "mixture_changed" ? "Data mixture changed"
          : `Fault injected: ${p.fault || ""}`;
      } else if (ev.name === "checkpoint_saved" || ev.name === "checkpoint_written") {
        out.group = "checkpoint";
        out.text = ev.name === "checkpoint_saved" ? "Checkpoint saved" : "Checkpoint written to disk";
      } else if (ev.name === "compiled") {
        out.text = "Compiled" + (typeof p.seconds === "number" ? ` in ${p.seconds.toFixed(1)} s` : "") +
          (p.devices ? ` on ${p.devices}` : "");
      } else if (ev.name === "forecast") { // static/js/forecast.js draws it; the experiment page verifies it
        out.text = `Pre-registered forecast: ${(p.experiment || {}).name || "unnamed experiment"} (sha256 ` +
          `${String(p.sha256 || "").slice(0, 12)}…)`;
      } else if (p.detail) {
        out.text = `${ev.name} — ${p.detail}`;
      }
      return out;
    }

    item(e) {
      return el("li", "ev ev-" + e.group, undefined,
                el("span", "ev-step", e.step == null ? "–" : "step " + e.step), " ",
                el("span", "ev-text", e.text),
                e.t ? Obs.el("time", {class: "muted", text: " " + Obs.utc(e.t), dateTime: e.t})
                  : null);
    }

    render() {
      for (const [key] of GROUPS) this.counts.get(key).textContent = "(" +
        this.entries.filter((e) => e.group === key).length + ")";
      const shown = this.entries.filter((e) => this.show.has(e.group)).reverse(); // newest first
      const out = [];
      for (let i = 0; i < shown.length;) {
        if (shown[i].group !== "checkpoint") { out.push(this.item(shown[i])); i++; continue; }
        let j = i;
        while (j < shown.length && shown[j].group === "checkpoint") j++;
        const run = shown.slice(i, j);
        if (run.length < 3) run.forEach((e) => out.push(this.item(e)));
        else { // routine: one line, details on demand
          const steps = run.map((e) => e.step).filter((s) => s != null);
          out.push(el("li", "ev ev-checkpoint collapsed", undefined, el("details", "", undefined,
            el("summary", "", `${run.length} routine checkpoint events` +
               (steps.length ? `, steps ${Math.min(...steps)}–${Math.max(...steps)}` : "")),
            el("ol", "ev-inner", undefined, ...run.map((e) => this.item(e))))));
        }
        i = j;
      }
      this.list.replaceChildren(...out);
      this.section.querySelector("#events-empty").hidden = out.length > 0;
    }
  }

  Obs.EventLog = EventLog;
})(window.Obs);
