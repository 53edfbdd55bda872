// Operator interventions on the public dashboard: each applied command a marker at the step the trainer applied it,
// labelled with its reason (and the operator's name where they opted in); undone ones are not drawn. Close labels
// fold into one with a count (charts.js). Source: GET /api/runs/<id>/interventions/ (public).
"use strict";

(function (Obs) {
  // Read again when the run's live events say a command was applied or undone (the trainer acks a command before
  // its event, so the read has it), and every REFRESH_MS for what no event said (a viewer who reconnected late).
  const REFRESH_MS = 60000;
  const TOLD = new Set(["command", "commands_rolled_back", "rollback"]); // the events that change the list
  const LABEL_CHARS = 32; // labels sit side by side at the top of a chart; the whole reason is a click away
  // Words, not pictographs: a label must read the same on a machine without an emoji font.
  const ICONS = {pause: "pause:", resume: "resume:", stop: "stop:", checkpoint: "ckpt:", rollback: "rollback:",
                 "set-lr-multiplier": "LR×:", "set-token-budget": "budget:", "set-mixture": "mix:",
                 "inject-fault": "fault:"};

  const short = (s) => (s.length > LABEL_CHARS ? s.slice(0, LABEL_CHARS - 1) + "…" : s);

  const who = (c) => (c.user ? ` — ${c.user}` : "");
  const text = (c) => `${ICONS[c.command] || c.command} ${c.reason}${who(c)}`;

  // Commands applied at one step (a pause and its resume, say) share one marker, so labels do not overprint.
  function marker(group) {
    return {
      id: "intervention-" + group[0].id, x0: group[0].step, color: "#6a1b9a", textColor: "var(--mark-cmd, #4a148c)",
      label: short(text(group[0])) + (group.length > 1 ? ` +${group.length - 1}` : ""), // (drawn as text)
      hover: group.map((c) => `step ${c.step} · ${text(c)}`), collapse: true,
      onClick: () => group.forEach((c) => Obs.toast(`${c.command} at step ${c.step}${who(c)}: ${c.reason}. ` +
        `Trainer: ${c.detail}`, "info")),
    };
  }

  function grouped(list) {
    const at = new Map();
    list.forEach((c) => at.set(c.step, [...(at.get(c.step) || []), c]));
    return [...at.values()];
  }

  function start(ctx, page) {
    const url = `/api/runs/${encodeURIComponent(page.run_id)}/interventions/`;
    let shown = "", busy = false, again = false;
    async function load() {
      if (document.hidden) return; // (read on the tab's return)
      if (busy) { again = true; return; } // (an event during a read: one more read after it)
      busy = true;
      try {
        const r = await fetch(url);
        if (!r.ok) return;
        // an undone command (a rollback went back past it) is on the abandoned branch: not drawn on the new
        // timeline's steps (the log and the event list keep it)
        const list = (await r.json()).interventions.filter((c) => c.step !== null && !c.undone_by);
        const key = list.map((c) => c.id).join();
        if (key === shown) return;
        shown = key;
        Obs.setOverlays("interventions", grouped(list).map(marker));
        ctx.schedule();
      } catch (e) {
        console.warn("interventions:", e);
      } finally {
        busy = false;
        if (again) { again = false; load(); }
      }
    }
    load();
    setInterval(load, REFRESH_MS);
    document.addEventListener("visibilitychange", () => { if (!document.hidden) load(); });
    Obs.onEvents.push((list) => { if (list.some((ev) => TOLD.has(ev.name))) load(); });
  }

  Obs.onStart.push(start);
})(window.Obs);
