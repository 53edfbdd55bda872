// The live run list: its rows as the server renders them (/runs/?part=rows, templates/runs/_run_row.html: state,
// step, progress, time left), asked for every poll_s (small, and the live socket's fan-out is per run; paused while
// the tab is hidden) and put in place only when they changed (the answer's ETag: 304 while nothing did). The runs
// ticked for comparison stay ticked.
"use strict";

(function () {
  const Obs = window.Obs;
  const page = JSON.parse(document.getElementById("page-data").textContent);
  const body = document.querySelector("#runs tbody"), $ = (id) => document.getElementById(id);
  let failures = 0;

  async function poll() {
    if (document.hidden) return;
    try {
      const ticked = new Set([...body.querySelectorAll("input[name=runs]:checked")].map((i) => i.value));
      if (await Obs.refreshFragment(body, "/runs/?part=rows")) {
        body.querySelectorAll("input[name=runs]").forEach((i) => { i.checked = ticked.has(i.value); });
        const n = body.querySelectorAll("tr[data-run]").length;
        $("runs").hidden = n === 0;
        $("runs-empty").hidden = n > 0;
      }
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
