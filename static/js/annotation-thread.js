// The annotations panel: a run's notes as a list and one thread at a time (replies, reactions, edits with history,
// delete, quote/link, moderation); state and helpers on Obs.annotations for annotations.js, loaded after it. A thread
// is rendered by the server as its viewer may see and act on it (/annotations/<id>/thread/, webapp/annotations/
// views.py) and put in place here, again whenever it may have changed; this wires its buttons. Bodies are HTML
// rendered and sanitised by the server (webapp/annotations/markdown.py); all else goes in as text.
"use strict";

(function (Obs) {
  const S = {ctx: null, runId: null, viewer: {id: null, can: {}}, tags: [], kinds: {}, byId: new Map(),
             removed: new Set(), openId: null, thread: null, loaded: false};
  const $ = (id) => document.getElementById(id);

  const el = Obs.el; // (plotkit.js)
  const short = (s, n) => (s.length > n ? s.slice(0, n - 1) + "…" : s);
  const steps = (a) => (a.step_end > a.step_start ? `steps ${a.step_start}–${a.step_end}` : `step ${a.step_start}`);
  const when = (iso) => (iso ? new Date(iso).toISOString().slice(0, 16).replace("T", " ") + " UTC" : "");
  const mine = (p) => S.viewer.id !== null && p.author && p.author.id === S.viewer.id;

  const csrf = () => document.querySelector("#ann-panel input[name=csrfmiddlewaretoken]")?.value || "";
  const urlOf = (target, id) => `/api/${target === "annotation" ? "annotations" : "replies"}/${id}/`;
  const bodyOf = (html) => el("div", {className: "ann-body", innerHTML: html});

  async function api(method, url, body) {
    const opts = {method, credentials: "same-origin", headers: {"X-CSRFToken": csrf()}};
    if (body !== undefined) { opts.headers["Content-Type"] = "application/json"; opts.body = JSON.stringify(body); }
    const r = await fetch(url, opts);
    let data = null;
    try { data = await r.json(); } catch (e) { /* an empty or HTML answer: the status says enough */ }
    if (!r.ok) throw new Error((data && data.error) || `HTTP ${r.status}`);
    return data;
  }
  const fail = (e) => Obs.toast("Annotations: " + e.message, "warning");

  // ------------------------------------------------------------------------------------------ list
  function renderList() {
    const list = $("ann-list");
    if (!list) return;
    const items = [...S.byId.values()].sort((a, b) => a.step_start - b.step_start || a.id - b.id);
    $("ann-count").textContent = items.length ? `(${items.filter((a) => !a.hidden && !a.deleted).length})` : "";
    const gone = (a) => a.hidden || a.deleted;
    list.replaceChildren(...items.map((a) => el("li", {className: "ann-item" + (gone(a) ? " muted-post" : "")},
      el("button", {className: "link", text: a.title, attrs: {"data-annotation": a.id},
                    on: {click: () => openThread(a.id)}}),
      el("span", {className: "muted", text: ` ${steps(a)}${a.metric ? " · " + a.metric : ""} · ` +
        `${a.reply_count} repl${a.reply_count === 1 ? "y" : "ies"}` +
        `${a.hidden ? " · hidden" : ""}${a.deleted ? " · deleted" : ""}`}))));
    if (!items.length) list.replaceChildren(el("li", {className: "empty", text: "No annotations yet."}));
    list.hidden = S.openId !== null;
  }

  function showPanel(on) {
    $("ann-panel").hidden = !on;
    $("ann-toggle").setAttribute("aria-expanded", String(on));
    document.body.classList.toggle("ann-open", on);
    window.dispatchEvent(new Event("resize")); // charts take the width the panel leaves
  }

  // ------------------------------------------------------------------------------------------ thread
  async function openThread(id) {
    S.openId = id;
    showPanel(true);
    $("ann-form").hidden = true;
    try {
      S.thread = await api("GET", `/api/annotations/${id}/`);
      merge(S.thread.annotation);
    } catch (e) {
      S.thread = null; S.openId = null;
      fail(e);
    }
    renderThread();
    Obs.annotations.changed();
  }

  function closeThread() { S.openId = null; S.thread = null; renderThread(); Obs.annotations.changed(); }

  // A small form under a post: `kids`, then `verb` to submit and Cancel; no native dialogs. send() returns the
  // request to make (or nothing: not yet), and the thread is read again once it is answered.
  function postForm(cls, kids, verb, cancel, send) {
    const form = el("form", {className: cls}, ...kids, el("button", {text: verb, attrs: {type: "submit"}}), " ",
                    el("button", {text: "Cancel", attrs: {type: "button"}, on: {click: () => cancel(form)}}));
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      send()?.then(refresh).catch(fail);
    });
    return form;
  }

  // An inline confirmation under a post's actions, with a text field when `field` is named.
  function ask(where, question, field, verb, run) {
    where.parentNode.querySelector(".ann-ask")?.remove();
    const input = field ? el("input", {attrs: {name: field, maxlength: "500", required: ""}}) : null;
    where.after(postForm("ann-ask", [el("span", {text: question + " "}), input], verb, (form) => form.remove(),
                         () => (input && !input.value.trim() ? null : run(input ? input.value : undefined))));
    if (input) input.focus();
  }

  // The open thread as the server renders it (none: the list alone); what is being typed in the reply box is kept.
  function renderThread() {
    const box = $("ann-thread");
    const t = S.thread;
    box.hidden = !t;
    $("ann-title").textContent = t ? "Thread" : "Annotations";
    renderList();
    if (!t) { box.replaceChildren(); delete box.dataset.etag; return Promise.resolve(); }
    const typed = box.querySelector("textarea[name=reply]")?.value;
    return Obs.refreshFragment(box, `/annotations/${t.annotation.id}/thread/`).then((changed) => {
      const ta = box.querySelector("textarea[name=reply]");
      if (changed && typed && ta) ta.value = typed;
    }).catch(fail);
  }
  const rerender = () => { delete $("ann-thread").dataset.etag; return renderThread(); }; // (a form's Cancel)

  const postOf = (target, id) => (target === "annotation" ? S.thread?.annotation
    : S.thread?.replies.find((r) => r.id === id));

  // The thread's buttons by their data-act, on the post (data-post: "annotation-5", "reply-9") they are in.
  function onThreadClick(ev) {
    const b = ev.target.closest("button"), box = b?.closest("[data-post]");
    if (b?.dataset.act === "back") { closeThread(); return; }
    if (!box || b.disabled) return;
    const [target, id] = box.dataset.post.split("-"), pid = Number(id), base = urlOf(target, pid);
    const acts = box.querySelector(".ann-actions"), verb = b.dataset.verb;
    const pressed = b.getAttribute("aria-pressed") === "true";
    if (b.classList.contains("ann-react")) react(target, pid, b.dataset.kind, !pressed);
    else if (b.dataset.act === "history") history(target, pid, box);
    else if (b.dataset.act === "edit" && postOf(target, pid)) editPost(target, postOf(target, pid), box);
    else if (b.dataset.act === "delete") ask(acts, "Delete this post?", null, "Delete", () => api("DELETE", base));
    else if (b.dataset.act === "moderate") {
      ask(acts, `${verb} — reason (moderators and the author see it):`, "reason", verb,
          (reason) => api("POST", base + "moderation/", {action: verb === "Restore" ? "unhide" : "hide", reason}));
    } else if (b.dataset.act === "quote") { // a link to this note in the reply being written
      const t = $("ann-thread").querySelector("textarea[name=reply]");
      if (t) { t.value += `#a${pid} `; t.focus(); }
    }
  }

  function onReply(ev) {
    if (!ev.target.matches("form.ann-reply")) return;
    ev.preventDefault();
    const ta = ev.target.querySelector("textarea[name=reply]"), a = S.thread?.annotation;
    if (!a || !ta.value.trim()) return;
    api("POST", `/api/annotations/${a.id}/replies/`, {body: ta.value})
      .then((r) => { ta.value = ""; upsertReply(r); renderThread(); Obs.annotations.changed(); }).catch(fail);
  }

  function editPost(target, p, box) {
    const title = target === "annotation"
      ? el("input", {attrs: {name: "title", maxlength: "200"}, value: p.title}) : null;
    const body = el("textarea", {attrs: {name: "body", rows: "5", maxlength: title ? "10000" : "5000"}, value: p.body});
    const patch = () => (title ? {title: title.value, body: body.value} : {body: body.value});
    box.querySelector(".ann-body").replaceWith(postForm("ann-edit", [title, body], "Save", rerender,
                                                        () => api("PATCH", urlOf(target, p.id), patch())));
  }

  async function history(target, id, box) {
    try {
      const data = await api("GET", urlOf(target, id) + "revisions/");
      const list = el("ol", {className: "ann-history"}, ...data.revisions.map((r) => el("li", {},
        el("p", {className: "muted", text: `version of ${when(r.written_at)}` + (r.title ? ` — “${r.title}”` : "")}),
        bodyOf(r.body_html))));
      box.querySelector(".ann-history")?.remove();
      box.append(el("p", {className: "muted", text: "Earlier versions:"}), list);
    } catch (e) { fail(e); }
  }

  async function react(target, id, kind, on) {
    try {
      await api("POST", urlOf(target, id) + "reactions/", {kind, on});
      await renderThread();
    } catch (e) { fail(e); }
  }

  function refresh() { // (read again and put in place even where the server's answer is the same)
    delete $("ann-thread").dataset.etag;
    return S.openId !== null ? openThread(S.openId) : Promise.resolve(); }

  // Our own new reply into the open thread, its count from the thread's visible replies.
  function upsertReply(r) {
    const t = S.thread;
    if (!t || t.annotation.id !== r.annotation) return;
    const i = t.replies.findIndex((x) => x.id === r.id);
    if (i >= 0) t.replies[i] = r; else t.replies.push(r);
    t.annotation.reply_count = t.replies.filter((x) => !x.hidden && !x.deleted).length;
    if (S.byId.has(r.annotation)) S.byId.get(r.annotation).reply_count = t.annotation.reply_count;
  }

  function merge(a) {
    if (S.removed.has(a.id) && !a.hidden && !a.deleted) S.removed.delete(a.id);
    S.byId.set(a.id, a);
    if (S.thread && S.thread.annotation.id === a.id) S.thread.annotation = a;
  }

  Obs.onStart.push(() => {
    $("ann-thread").addEventListener("click", onThreadClick);
    $("ann-thread").addEventListener("submit", onReply);
  });

  Obs.annotations = {S, $, el, short, mine, api, fail, showPanel, renderList, openThread, closeThread, renderThread,
                     refresh, merge, changed: () => {}};
})(window.Obs);
