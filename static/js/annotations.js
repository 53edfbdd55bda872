// Community annotations on the charts: bands and markers on every line chart (Obs.setOverlays), drawing a new note
// (shift-drag, a click on a point, or the Annotate button), and live `annotation` frames so every viewer sees a new
// note, reply or hide at once. The panel and threads are annotation-thread.js, which shares Obs.annotations.
"use strict";

(function (Obs) {
  const A = Obs.annotations;
  const {S, $, el, short, api, fail, mine} = A;
  const SOURCE = "annotations";

  // ------------------------------------------------------------------------------------------ overlays
  // Every chart draws every shape and label: labels go to at most MAX_LABELS notes (the open
  // thread, then the most discussed); past MERGE_ABOVE notes the unlabelled ones merge into spans (per metric)
  // that touch or nearly touch. Every note stays clickable inside its band (noteAt) and listed in the panel.
  const MAX_LABELS = 40, MERGE_ABOVE = 150;

  function mark(a, labelled) {
    const band = a.step_end > a.step_start;
    const tone = a.hidden ? [120, 120, 120] : [21, 101, 192];
    const alpha = a.id === S.openId ? 0.26 : 0.13;
    return {id: "annotation-" + a.id, x0: a.step_start, x1: band ? a.step_end : undefined,
            metric: a.metric || undefined, onClick: () => A.openThread(a.id), collapse: true, // (labels fold)
            label: labelled ? (a.hidden ? "⊘ " : "✎ ") + short(a.title, 28) +
              (a.reply_count ? ` (${a.reply_count})` : "") : undefined,
            color: band ? `rgba(${tone},${alpha})` : `rgb(${tone})`,
            textColor: a.hidden ? "var(--muted, #5b6470)" : "var(--blue, #1a56b0)"}; // (theme colours: readable)
  }

  function merged(notes) {
    const lo = Math.min(...notes.map((a) => a.step_start)), hi = Math.max(...notes.map((a) => a.step_end));
    const gap = Math.max(1, (hi - lo) / 300);
    const spans = new Map(); // metric -> [[x0, x1]]
    for (const a of notes.slice().sort((p, q) => p.step_start - q.step_start)) {
      const list = spans.get(a.metric) || spans.set(a.metric, []).get(a.metric);
      const last = list[list.length - 1];
      if (last && a.step_start <= last[1] + gap) last[1] = Math.max(last[1], a.step_end);
      else list.push([a.step_start, a.step_end]);
    }
    const out = [];
    spans.forEach((list, metric) => list.forEach(([x0, x1], i) => out.push({
      id: `annotations-${metric}-${i}`, x0, x1: x1 > x0 ? x1 : undefined, metric: metric || undefined,
      color: x1 > x0 ? "rgba(21,101,192,0.13)" : "rgb(21,101,192)"})));
    return out;
  }

  // A note made before a rewind (a rollback, a restart from a checkpoint) on steps past where it went back is on
  // the abandoned branch: those steps were trained again, so it is not drawn on the new timeline (the panel and its
  // thread keep it).
  function abandoned(a) {
    const made = Date.parse(a.created_at);
    return (S.ctx && S.ctx.rewinds || []).some((r) => r.t && a.step_start > r.to_step && made < Date.parse(r.t));
  }

  function overlays() {
    const items = [...S.byId.values()].filter((a) => !a.deleted && !abandoned(a));
    const rank = (a) => (a.id === S.openId ? 1e9 : 0) + a.reply_count * 1e4 + a.id / 1e6;
    const labelled = new Set(items.slice().sort((a, b) => rank(b) - rank(a)).slice(0, MAX_LABELS).map((a) => a.id));
    if (items.length <= MERGE_ABOVE) return items.map((a) => mark(a, labelled.has(a.id)));
    return [...items.filter((a) => labelled.has(a.id)).map((a) => mark(a, true)),
            ...merged(items.filter((a) => !labelled.has(a.id)))];
  }

  // The note under a clicked step (the narrowest band holding it, or a marker within `slack` steps), if any.
  function noteAt(step, slack) {
    let best = null;
    for (const a of S.byId.values()) {
      if (a.deleted || step < a.step_start - slack || step > a.step_end + slack) continue;
      if (!best || a.step_end - a.step_start < best.step_end - best.step_start) best = a;
    }
    return best;
  }

  const changed = A.changed = () => {
    Obs.setOverlays(SOURCE, overlays());
    if (S.ctx) S.ctx.schedule();
    A.renderList();
  };

  // ------------------------------------------------------------------------------------------ compose
  function compose(x0, x1, metric) {
    if (!S.viewer.can.create) return;
    const f = $("ann-form");
    const [a, b] = [Math.round(Math.min(x0, x1)), Math.round(Math.max(x0, x1))];
    const fe = f.elements, sel = fe.metric;
    fe.step_start.value = Math.max(0, a); fe.step_end.value = Math.max(0, b);
    const names = [...document.querySelectorAll(".chart[data-metric]")].map((c) => c.dataset.metric);
    sel.replaceChildren(el("option", {text: "every chart", attrs: {value: ""}}),
                        ...[...new Set(names)].map((n) => el("option", {text: n, attrs: {value: n}})));
    sel.value = metric && names.includes(metric) ? metric : "";
    f.querySelector(".ann-error").hidden = true;
    S.openId = null; S.thread = null; A.renderThread();
    A.showPanel(true);
    $("ann-list").hidden = true;
    f.hidden = false;
    fe.title.focus();
  }

  async function submitCompose(ev) {
    ev.preventDefault();
    const f = $("ann-form"), fe = f.elements;
    const body = {title: fe.title.value, body: fe.body.value, metric: fe.metric.value || null,
                  step_start: parseInt(fe.step_start.value, 10), step_end: parseInt(fe.step_end.value, 10),
                  tags: [...f.querySelectorAll("input[name=tags]:checked")].map((i) => i.value)};
    try {
      const a = await api("POST", `/api/runs/${encodeURIComponent(S.runId)}/annotations/`, body);
      f.reset(); f.hidden = true;
      A.merge(a);
      A.openThread(a.id);
    } catch (e) {
      const err = f.querySelector(".ann-error");
      err.textContent = e.message; err.hidden = false;
    }
  }

  // Chart x (steps, or tokens/time when the dashboard's x axis says so) -> a step.
  const toStep = (x) => (S.ctx ? S.ctx.xaxis.toStep(x) : Number(x));

  // A shift-drag across a chart selects a step range (plot.js offers it here before it would zoom: taken, it does
  // not); a click on the plot annotates that step (or opens the note there).
  function hookPlot(plot) {
    if (plot.__obsAnnotations || !plot._figure) return;
    plot.__obsAnnotations = true;
    const metric = () => (plot.closest(".chart") || {dataset: {}}).dataset.metric;
    let shift = false; // (the drag began with shift held)
    plot.addEventListener("mousedown", (ev) => { shift = ev.shiftKey; }, true);
    plot.addEventListener("obs-plot-select", (ev) => {
      if (!shift || !S.viewer.can.create) return; // (not taken: the chart zooms)
      ev.preventDefault();
      compose(toStep(ev.detail.x0), toStep(ev.detail.x1), metric());
    });
    plot.addEventListener("obs-plot-click", (ev) => { // inside a note: its thread; elsewhere (members): a new note
      const step = toStep(ev.detail.x);
      const slack = Math.abs(toStep(Obs.figureXAt(plot, 4)) - toStep(Obs.figureXAt(plot, 0))); // 4 px
      const hit = noteAt(step, slack);
      if (hit) A.openThread(hit.id);
      else if (S.viewer.can.create) compose(step, step, metric());
    });
  }

  const hookAll = () => document.querySelectorAll(".chart .plot").forEach(hookPlot);

  // ------------------------------------------------------------------------------------------ live
  function removed(id) {
    if (S.viewer.can.moderate || (S.byId.has(id) && mine(S.byId.get(id)))) {
      // moderators (and the author) keep it, marked: fetch the record as they may see it
      api("GET", `/api/annotations/${id}/`).then((t) => {
        A.merge(t.annotation);
        if (S.openId === id) S.thread = t;
        A.renderThread(); changed();
      }).catch(() => { S.byId.delete(id); changed(); });
      return;
    }
    S.byId.delete(id); S.removed.add(id);
    if (S.openId === id) { A.closeThread(); Obs.toast("That annotation was removed.", "info"); }
  }

  // A frame names a post (id, version, counts), never its text: the post is read over HTTP as this viewer may see
  // it, so a note hidden meanwhile answers 404 here and is never shown. One read per id at a time; a newer
  // version arriving during it reads again once it is done.
  const reading = new Map(); // annotation id -> the version still to read after the current read, or null
  function fetchNote(id, version) {
    if (reading.has(id)) { reading.set(id, version); return; }
    reading.set(id, null);
    api("GET", `/api/annotations/${id}/?v=${encodeURIComponent(version || "")}`).then((t) => {
      A.merge(t.annotation);
      if (S.openId === id) S.thread = t;
    }).catch(() => { // gone for this viewer (hidden, deleted): as a "remove"
      if (S.byId.has(id) && !S.viewer.can.moderate) { S.byId.delete(id); S.removed.add(id); }
    }).finally(() => {
      const again = reading.get(id);
      reading.delete(id);
      if (again != null) { fetchNote(id, again); return; }
      if (S.openId !== null && S.thread) A.renderThread();
      changed();
    });
  }

  Obs.frameHandlers.annotation = (f, ctx) => {
    S.ctx = ctx;
    const t = S.thread;
    switch (f.event) {
      case "upsert": {
        const a = S.byId.get(f.id);
        if (a && a.reply_count !== f.reply_count) a.reply_count = f.reply_count;
        if (!a || (a.edited_at || a.created_at) !== f.version || a.hidden) fetchNote(f.id, f.version);
        break;
      }
      case "remove": removed(f.id); break;
      case "reply":
      case "reply_remove": {
        const a = S.byId.get(f.annotation_id);
        if (a) a.reply_count = f.reply_count;
        if (!t || t.annotation.id !== f.annotation_id) break;
        t.annotation.reply_count = f.reply_count;
        // a removed reply stays, marked, for moderators and its author: read again as they may see it
        const keep = S.viewer.can.moderate || t.replies.some((r) => r.id === f.id && mine(r));
        if (f.event === "reply" || keep) A.refresh(); else t.replies = t.replies.filter((r) => r.id !== f.id);
        break;
      }
      case "reactions": {
        const target = f.target === "annotation" ? (t && t.annotation.id === f.id ? t.annotation : null)
          : (t ? t.replies.find((r) => r.id === f.id) : null);
        if (target) target.reactions = f.reactions;
        if (f.target === "annotation" && S.byId.has(f.id)) S.byId.get(f.id).reactions = f.reactions;
        break;
      }
      default: return;
    }
    if (S.openId !== null && t) A.renderThread();
    changed();
  };

  // ------------------------------------------------------------------------------------------ start
  function zoomTo(a) {
    const pad = Math.max(20, (a.step_end - a.step_start) * 2);
    if (Obs.zoomTo) Obs.zoomTo(Math.max(0, a.step_start - pad), a.step_end + pad); // the view's own zoom
  }

  Obs.onEvents.push((list) => { if (S.loaded && list.some((e) => e.kind === "rewind")) changed(); });

  Obs.onStart.push(async (ctx, page) => {
    S.ctx = ctx; S.runId = page.run_id;
    $("ann-toggle").addEventListener("click", () => A.showPanel($("ann-panel").hidden));
    $("ann-close").addEventListener("click", () => A.showPanel(false));
    $("ann-new").addEventListener("click", () => { // no drag on a phone: start at the run's latest step
      const last = parseInt($("stat-step").textContent, 10);
      compose(last || 0, last || 0, "");
    });
    $("ann-form").addEventListener("submit", submitCompose);
    $("ann-form").querySelector(".ann-cancel").addEventListener("click", () => {
      $("ann-form").hidden = true; A.renderList();
    });
    hookAll();
    new MutationObserver(hookAll).observe($("charts"), {childList: true, subtree: true});
    try {
      const data = await api("GET", `/api/runs/${encodeURIComponent(S.runId)}/annotations/`);
      S.viewer = data.viewer; S.tags = data.tags; S.kinds = data.reactions;
      for (const a of data.annotations) { // frames that came meanwhile are newer: keep them
        if (!S.byId.has(a.id) && !S.removed.has(a.id)) S.byId.set(a.id, a);
      }
      S.loaded = true;
    } catch (e) { fail(e); }
    const can = S.viewer.can.create;
    $("ann-new").hidden = !can;
    $("ann-signin").hidden = S.viewer.id !== null;
    $("ann-hint").textContent = !can ? "Community notes are drawn on the charts; click one to read its thread." :
      Obs.coarsePointer() ? "Tap a point on a chart, or use Annotate, to add a note." :
      "Shift-drag across a chart (or click a point) to annotate it.";
    $("ann-form").querySelector(".ann-tags").append(...S.tags.map((t) =>
      el("label", {className: "ann-tag-choice"},
         el("input", {attrs: {type: "checkbox", name: "tags", value: t}}), " " + t)));
    changed();
    const want = parseInt(new URLSearchParams(location.search).get("annotation"), 10);
    if (Number.isFinite(want)) {
      await A.openThread(want);
      if (S.thread) zoomTo(S.thread.annotation);
    }
  });
})(window.Obs);
