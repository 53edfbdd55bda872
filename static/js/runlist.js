// The live run list: polls /api/runs/ (small, and the live socket's fan-out is per run; paused while the tab is
// hidden), updates each row in place and adds new runs' rows as the server renders them (/runs/?rows=).
"use strict";

(function () {
  const Obs = window.Obs;
  const page = JSON.parse(document.getElementById("page-data").textContent);
  const body = document.querySelector("#runs tbody"), $ = (id) => document.getElementById(id);
  let failures = 0;

  const num = (v) => (typeof v === "number" && Number.isFinite(v) ? v : null);

  // Rows of runs that appeared, rendered by the server's own row template (templates/runs/_run_row.html).
  async function newRows(ids) {
    const r = await fetch("/runs/?rows=" + encodeURIComponent(ids.join(",")));
    if (!r.ok) throw new Error("HTTP " + r.status);
    const t = document.createElement("template");
    t.innerHTML = "<table><tbody>" + (await r.text()) + "</tbody></table>";
    return new Map([...t.content.querySelectorAll("tr[data-run]")].map((tr) => [tr.dataset.run, tr]));
  }

  function update(tr, run) {
    const q = (s) => tr.querySelector(s), progress = q(".progress");
    Object.assign(q(".state"), {textContent: run.state, className: "badge state state-" + run.state});
    Object.assign(q(".health"), {textContent: run.health, className: "badge health health-" + run.health});
    q(".step").textContent = run.last_step === null ? "–" : run.last_step;
    const p = run.progress || {}, tokens = num(p.tokens), budget = num(p.token_budget);
    const frac = tokens !== null && budget ? Math.min(1, tokens / budget) : null;
    let bar = progress.querySelector("progress");
    if (frac !== null) {
      const label = {"aria-label": "tokens trained of the budget, " + (run.name || run.id)};
      if (!bar) bar = progress.insertBefore(Obs.el("progress", {max: 100, attrs: label}), progress.firstChild);
      bar.value = Math.round(frac * 100);
    }
    progress.querySelector(".pct").textContent = frac === null ? "–" : Obs.percent(frac);
    q(".eta").textContent = Obs.timeLeft(run, frac, num(p.eta_s));
    const t = q(".updated time");
    if (run.updated_at && t) {
      t.dateTime = run.updated_at;
      t.textContent = Obs.duration((Date.now() - Date.parse(run.updated_at)) / 1000) + " ago";
    }
  }

  async function poll() {
    if (document.hidden) return;
    try {
      const r = await fetch("/api/runs/?limit=" + page.limit);
      if (!r.ok) throw new Error("HTTP " + r.status);
      const runs = (await r.json()).runs;
      const rows = new Map([...body.querySelectorAll("tr[data-run]")].map((tr) => [tr.dataset.run, tr]));
      const missing = runs.filter((run) => !rows.has(run.id)).map((run) => run.id);
      if (missing.length) (await newRows(missing)).forEach((tr, id) => rows.set(id, tr));
      runs.forEach((run, i) => {
        const tr = rows.get(run.id);
        if (!tr) return; // gone between the two requests: the next poll sees it
        update(tr, run);
        if (body.children[i] !== tr) body.insertBefore(tr, body.children[i] || null); // newest first
      });
      $("runs").hidden = runs.length === 0;
      $("runs-empty").hidden = runs.length > 0;
      failures = 0;
      $("runs-status").textContent = "";
    } catch (e) {
      if (++failures === 3) $("runs-status").textContent = "Live updates paused: the server did not answer. Retrying…";
    }
  }

  setInterval(poll, page.poll_s * 1000);
  document.addEventListener("visibilitychange", () => { if (!document.hidden) poll(); });
  poll();
})();
