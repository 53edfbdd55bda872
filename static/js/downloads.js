// Download links on each chart: its series over the steps it shows as CSV, JSON or Parquet at full resolution, from
// the public export API (GET /api/v1/runs/<id>/export.<fmt>, docs/API.md). The run's own links are in the header.
"use strict";

(function (Obs) {
  const FORMATS = [["csv", "CSV"], ["json", "JSON"], ["parquet", "Parquet"]];

  // The export URL of `names` (series of run `runId`) over `range` ([from, to] steps, or null: the whole run).
  Obs.exportUrl = (runId, names, range, fmt) => {
    const q = new URLSearchParams();
    names.forEach((n) => q.append("series", n)); // repeated: a name holding a comma stays whole
    if (range) { q.set("start", String(Math.max(0, Math.floor(range[0])))); q.set("end", String(Math.ceil(range[1]))); }
    return `/api/v1/runs/${encodeURIComponent(runId)}/export.${fmt}?${q}`;
  };

  // The open menu inside the viewport: under the summary's right edge (CSS), moved left or right as far as needed
  // (a phone's tool bar may sit anywhere along the narrow chart head).
  const fit = (menu) => {
    menu.style.left = menu.style.right = "";
    const r = menu.getBoundingClientRect(), vw = document.documentElement.clientWidth;
    const left = Math.max(8, Math.min(r.left, vw - 8 - r.width));
    if (left === r.left) return;
    menu.style.left = (left - menu.parentElement.getBoundingClientRect().left) + "px";
    menu.style.right = "auto";
  };

  // The chart's download menu (a <details> in its tool bar): made once, by the chart's build().
  Obs.downloadMenu = (chart, tools) => {
    const el = Obs.el, say = "Download the data of " + chart.title; // (plotkit.js)
    const menu = el("span", {class: "download-menu"}, ...FORMATS.map(([fmt, text]) => el("a", {"data-fmt": fmt, text})),
                    el("span", {class: "muted download-note"}));
    const toggle = () => { Obs.downloadLinks(chart); if (det.open) fit(menu); };
    const det = el("details", {class: "download", on: {toggle}},
                   el("summary", {class: "tool", text: "⤓", title: say, attrs: {"aria-label": say}}), menu);
    tools.prepend(det);
    const close = (ev) => {
      if (!det.isConnected) document.removeEventListener("click", close); // (the chart was removed)
      else if (det.open && !det.contains(ev.target)) det.open = false;
    };
    document.addEventListener("click", close);
  };

  // Point the links at what the chart shows now: its series the run has, its visible step range.
  Obs.downloadLinks = (chart) => {
    const det = chart.box.querySelector("details.download");
    if (!det || (!chart.ctx.painted && !det.open)) return; // (before the first paint: dashboard.js afterPaint does)
    const range = chart.ctx.view.range, runId = chart.ctx.page.run_id;
    const names = chart.items.filter((it) => it.series && !it.series.waiting).map((it) => it.name);
    // (called on every redraw, live ones too: nothing to redo while the series and the range stay)
    const key = (range ? range.join("-") : "all") + "|" + names.join("|");
    if (chart.downloadKey === key) return;
    chart.downloadKey = key;
    const where = range ? `steps ${Math.max(0, Math.floor(range[0]))}–${Math.ceil(range[1])}` : "all steps";
    const slug = Obs.slug(chart.id) + (range ? `-${Math.max(0, Math.floor(range[0]))}-${Math.ceil(range[1])}` : "");
    det.querySelectorAll("a[data-fmt]").forEach((a) => {
      if (!names.length) { a.removeAttribute("href"); a.setAttribute("aria-disabled", "true"); return; }
      const href = Obs.exportUrl(runId, names, range, a.dataset.fmt);
      if (a.getAttribute("href") === href) return;
      a.href = href;
      a.removeAttribute("aria-disabled");
      a.download = `${runId}-${slug}.${a.dataset.fmt}`;
      a.title = `${names.join(", ")}, ${where}, every point`;
    });
    const text = names.length ? `${names.length} series, ${where}` : "nothing published yet";
    const note = det.querySelector(".download-note");
    if (note.textContent !== text) note.textContent = text;
  };
})(window.Obs);
