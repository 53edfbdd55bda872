// Operator panel: every run's progress and knobs, forms generated from the contract's command schema, and each
// command's life (sent → accepted → applied / rejected / no answer, undone by a rollback). State comes from the server
// (/ws/operate/ snapshots from Redis + SQL; polled while the socket is down), so a reload or restart loses nothing.
"use strict";

(function () {
  const page = JSON.parse(document.getElementById("operate-data").textContent);
  const $ = (id) => document.getElementById(id);
  const specs = new Map(page.specs.map((s) => [s.name, s]));
  // the mixture rule as the contract states it (observatory/contract/commands.py MIXTURE_RULE): relative weights
  const weightsArg = (specs.get("set-mixture") || {args: []}).args.find((a) => a.type === "weights") || {lo: 0};
  let snap = page.snapshot;
  let selected = page.select || null;
  let formFor = null; // "<run>/<command>" the form was built for
  let ws = null, attempts = 0, pollTimer = null, planTimer = null;

  // ------------------------------------------------------------------------------------------ helpers
  const el = Obs.el; // (plotkit.js)
  const num = (x) => (x == null || x === "" ? "–" : Number(x).toLocaleString("en-US"));
  const sig = (x, d = 3) => (x == null || typeof x !== "number" ? "–" : Number(x.toPrecision(d)).toString());
  const dur = (s) => (typeof s === "number" ? Obs.duration(s) : "–"); // (plotkit.js)
  const runOf = (id) => (snap.runs || []).find((r) => r.id === id) || null;
  const enc = encodeURIComponent;
  // the chart of the selected run (static/js/operate-chart.js): chart.load() reads its series, chart.draw() draws
  const chart = Obs.operateChart({page, $, num, runOf: (id) => runOf(id), commands: () => snap.commands || []});

  // ------------------------------------------------------------------------------------------ live state
  function connect() {
    const proto = location.protocol === "https:" ? "wss://" : "ws://";
    ws = new WebSocket(proto + location.host + page.ws_path);
    ws.onopen = () => { attempts = 0; $("op-conn").textContent = "live"; stopPolling(); };
    ws.onmessage = (ev) => { const m = JSON.parse(ev.data); if (m.type === "snapshot") apply(m); };
    ws.onclose = (ev) => {
      ws = null;
      if (ev.code === 4403) { $("op-conn").textContent = "not an operator"; return; }
      $("op-conn").textContent = "reconnecting… (polling)";
      startPolling();
      setTimeout(connect, Math.min(10000, 500 * 2 ** attempts++));
    };
  }
  function startPolling() { if (!pollTimer) pollTimer = setInterval(poll, 2000); }
  function stopPolling() { clearInterval(pollTimer); pollTimer = null; }
  async function poll() {
    try {
      const r = await fetch(page.snapshot_url, {credentials: "same-origin"});
      if (r.ok) apply(await r.json());
    } catch (e) { /* the socket's reconnect loop reports the outage */ }
  }
  function apply(s) { snap = s; render(); }
  function refreshSoon() { if (ws && ws.readyState === WebSocket.OPEN) ws.send('{"type":"refresh"}'); else poll(); }

  // ------------------------------------------------------------------------------------------ tables
  function render() {
    renderRuns();
    renderCommands();
    renderDetail();
  }

  // The two tables arrive rendered by the server (webapp/control/tables.py): in the page, then in every snapshot
  // the socket (or the poll) brings after it.
  function renderRuns() {
    if (snap.html) $("op-runs").querySelector("tbody").innerHTML = snap.html.runs;
    $("op-runs").querySelectorAll("tr[data-run]").forEach((tr) => tr.classList.toggle("selected",
                                                                                      tr.dataset.run === selected));
    $("op-no-runs").hidden = (snap.runs || []).length > 0;
    tickHeartbeats();
  }

  function tickHeartbeats() {
    document.querySelectorAll("#op-runs td.hb").forEach((td) => {
      const t = parseFloat(td.dataset.t);
      td.textContent = isFinite(t) ? `${Math.max(0, Math.round(Date.now() / 1000 - t))} s ago` : "–";
    });
  }

  function renderCommands() { if (snap.html) $("op-commands").querySelector("tbody").innerHTML = snap.html.commands; }

  const pick = (ev) => { const tr = ev.target.closest("#op-runs tr[data-run]"); if (tr) select(tr.dataset.run); };
  $("op-runs").addEventListener("click", pick);
  $("op-runs").addEventListener("keydown", (ev) => { if (ev.key === "Enter") pick(ev); });
  $("op-commands").addEventListener("click", (ev) => { // retry: the same id again
    const c = (snap.commands || []).find((x) => x.id === ev.target.closest("button[data-retry]")?.dataset.retry);
    if (c) post(c.run, {id: c.id, command: c.command, args: c.args, reason: c.reason, confirm: true});
  });

  // ------------------------------------------------------------------------------------------ one run
  function select(runId) {
    selected = runId;
    const u = new URL(location.href);
    u.searchParams.set("run", runId);
    history.replaceState(null, "", u);
    render();
  }

  function renderDetail() {
    const run = selected && runOf(selected);
    $("op-detail").hidden = !run;
    if (!run) return;
    const title = $("op-run-title");
    title.replaceChildren(el("span", {text: run.name + " "}),
      el("a", {href: `/runs/${enc(run.id)}/`, text: "dashboard"}), " · ",
      el("a", {href: `/runs/${enc(run.id)}/log/`, text: "command log"}));
    const bar = $("op-buttons");
    const names = [...specs.keys()].filter((n) => n !== "inject-fault" || run.allow_faults);
    if (bar.dataset.names !== names.join() + "|" + run.id) {
      bar.dataset.names = names.join() + "|" + run.id;
      bar.replaceChildren(...names.map((n) => el("button", {type: "button", text: n, title: specs.get(n).summary,
        "data-cmd": n, class: specs.get(n).destructive ? "destructive" : "", on: {click: () => chooseCommand(n)}})));
      if (formFor && !formFor.startsWith(run.id + "/")) { formFor = null; $("op-form").hidden = true; }
    }
    bar.querySelectorAll("button").forEach((b) =>
      b.classList.toggle("active", formFor === `${run.id}/${b.dataset.cmd}`));
    if (formFor) refreshCheckpointChoices(run);
    if (chart.run !== run.id) { chart.run = run.id; chart.series = {}; chart.preview = null; chart.load(); }
    chart.draw();
  }

  function chooseCommand(name) {
    const run = runOf(selected);
    formFor = `${run.id}/${name}`;
    buildForm(specs.get(name), run);
    renderDetail();
  }

  const input = (arg, value) => el("input", {type: "number", id: "op-arg-" + arg.name, name: arg.name,
    step: arg.type === "int" ? "1" : "any", min: arg.lo ?? undefined, max: arg.hi ?? undefined,
    value: value ?? undefined});

  function buildForm(spec, run) {
    const box = $("op-args");
    box.replaceChildren();
    $("op-summary").textContent = spec.summary;
    $("op-error").textContent = "";
    for (const a of spec.args) {
      let field;
      if (spec.name === "rollback" && a.name === "step") {
        field = el("select", {id: "op-arg-step", name: "step"});
      } else if (a.type === "choice") {
        field = el("select", {id: "op-arg-" + a.name, name: a.name},
                   ...a.choices.map((c) => el("option", {value: c, text: c})));
      } else if (a.type === "weights") {
        field = weightsField(run);
      } else {
        let value = a.default;
        if (spec.name === "set-lr-multiplier") value = run.lr_multiplier ?? 1;
        if (spec.name === "set-token-budget") value = run.token_budget;
        field = input(a, value);
      }
      box.append(el("label", {class: "op-field", "data-only-for": a.only_for.join(" ")},
        el("span", {text: `${a.name} `}), el("span", {class: "muted", text: a.help}), field));
    }
    if (spec.name === "rollback") refreshCheckpointChoices(run, true);
    $("op-confirm-box").hidden = !spec.destructive;
    $("op-confirm").checked = false;
    $("op-confirm-text").textContent = spec.name === "stop"
      ? `I understand: this ends run ${run.id} (a checkpoint is written first).`
      : `I understand: the steps after the chosen checkpoint are superseded on every chart of ${run.id}.`;
    $("op-send").textContent = `Send ${spec.name}`;
    $("op-form").hidden = false;
    box.querySelectorAll("input, select").forEach((i) => i.addEventListener("input", updatePreview));
    updatePreview();
  }

  function weightsField(run) {
    const mix = run.mixture || {};
    const box = el("div", {class: "op-weights", id: "op-weights"});
    for (const d of mix.domains || []) {
      const i = el("input", {type: "number", min: weightsArg.lo, step: "0.01", id: "op-w-" + d, "data-domain": d,
                             value: mix.weights && mix.weights[d] != null ? +mix.weights[d].toFixed(4) : 0});
      box.append(el("label", {class: "op-weight"}, el("span", {text: d}), i));
    }
    const scale = () => {
      const ins = [...box.querySelectorAll("input")], total = ins.reduce((s, i) => s + (+i.value || 0), 0);
      if (total > 0) ins.forEach((i) => { i.value = +((+i.value || 0) / total).toFixed(6); });
      updatePreview();
    };
    box.append(el("p", {class: "muted", id: "op-weights-sum"}),
               el("button", {type: "button", class: "small", text: "scale to sum 1", on: {click: scale}}));
    box.prepend(el("p", {class: "muted",
                         text: `weights of the current stage (${mix.stage_name || "?"}): ${weightsArg.help}`}));
    return box;
  }

  function refreshCheckpointChoices(run, force) {
    const sel = $("op-arg-step");
    if (!sel) return;
    const list = (run.checkpoints || []).slice().reverse();
    const key = list.map((c) => c.step).join();
    if (!force && sel.dataset.key === key) return;
    const keep = sel.value;
    sel.dataset.key = key;
    sel.replaceChildren(...list.map((c) => el("option", {value: c.step,
      text: `step ${c.step} · ${c.kind}${c.kept ? " · " + c.kept : ""}`})));
    if (!list.length) sel.append(el("option", {value: "", text: "no checkpoint published yet"}));
    if (keep && list.some((c) => String(c.step) === keep)) sel.value = keep;
  }

  function collectArgs(spec) {
    const args = {};
    const fault = $("op-arg-fault")?.value;
    for (const a of spec.args) {
      if (a.only_for.length && !a.only_for.includes(fault)) continue;
      if (a.type === "weights") {
        args.weights = Object.fromEntries([...document.querySelectorAll("#op-weights input")]
          .map((i) => [i.dataset.domain, +i.value || 0]));
        continue;
      }
      const v = $("op-arg-" + a.name).value;
      if (v === "") continue;
      // the number typed, whole or not sent as one: parseInt read 3e7 (the CLI's own spelling) as 3 and 1.5 as 1;
      // a number the field cannot be goes to the server as typed, which names what is wrong with it
      const n = Number(v), ok = a.type === "int" ? Number.isSafeInteger(n) : Number.isFinite(n);
      args[a.name] = a.type === "int" || a.type === "float" ? (ok ? n : v) : v;
    }
    return args;
  }

  // ------------------------------------------------------------------------------------------ previews
  function updatePreview() {
    const [runId, name] = (formFor || "/").split("/");
    const run = runOf(runId), spec = specs.get(name), out = $("op-preview");
    if (!run || !spec) return;
    const fault = $("op-arg-fault")?.value;
    document.querySelectorAll("#op-args [data-only-for]").forEach((w) => {
      w.hidden = !!w.dataset.onlyFor && !w.dataset.onlyFor.split(" ").includes(fault);
    });
    chart.preview = null;
    out.replaceChildren();
    const args = collectArgs(spec);
    if (name === "rollback" && args.step != null) {
      const to = args.step, from = run.step;
      const skip = args.skip_batches ? ` and skips ${args.skip_batches} batches` : "";
      if (from > to) {
        chart.preview = {band: [to, from]};
        out.append(el("p", {text: `Restores the checkpoint at step ${to}${skip}: ` +
          `steps ${to + 1}–${from} (${from - to} steps) are superseded, shaded on the chart; ` +
          `the state at step ${from} is checkpointed first, and commands applied after step ${to} are undone.`}));
      } else { // the newest checkpoint holds the trainer's step: going back to it abandons nothing
        out.append(el("p", {text: `Restores the checkpoint at step ${to}${skip}: it holds the run's latest step, ` +
          "so nothing is superseded and no command is undone."}));
      }
    } else if (name === "set-lr-multiplier" && args.value != null && run.lr != null) {
      const now = run.lr_multiplier ? run.lr / run.lr_multiplier : run.lr;
      out.append(el("p", {text: `LR now ${sig(run.lr)} → ${sig(now * args.value)} (×${args.value} of the ` +
                                `schedule).`}));
    } else if (name === "set-mixture") {
      const ws = Object.entries(args.weights || {}), total = ws.reduce((s, [, w]) => s + w, 0);
      $("op-weights-sum").textContent = total > 0 && ws.every(([, w]) => w >= weightsArg.lo)
        ? "the trainer samples " + ws.map(([d, w]) => `${d} ${+(100 * w / total).toFixed(1)}%`).join(" · ")
        : `not a mixture: ${weightsArg.help}`; // the server refuses it with the contract's own words
    } else if (name === "set-token-budget" && args.tokens) {
      clearTimeout(planTimer);
      planTimer = setTimeout(() => previewPlan(run, args.tokens), 250);
    }
    chart.draw();
  }

  async function previewPlan(run, tokens) {
    const out = $("op-preview");
    const r = await fetch(`/api/runs/${enc(run.id)}/plan/?tokens=${tokens}`, {credentials: "same-origin"});
    const body = await r.json();
    if (formFor !== `${run.id}/set-token-budget`) return;
    if (!r.ok) { out.replaceChildren(el("p", {class: "error", text: body.error})); return; }
    chart.preview = {plan: body};
    out.replaceChildren(el("p", {id: "op-plan-text", text:
      `Re-planned: ${num(body.new.total_steps)} steps (now ${num(body.old.total_steps)}); ` +
      `ETA ${dur(body.new.eta_s)} (now ${dur(body.old.eta_s)}). The LR stays ${sig(body.lr_now)} at step ` +
      `${num(body.step)} and decays to the new end (dashed on the chart).`}));
    chart.draw();
  }

  // ------------------------------------------------------------------------------------------ sending
  async function post(runId, body, attempt = 0) {
    const token = document.querySelector("#op-form input[name=csrfmiddlewaretoken]").value;
    let r;
    try {
      r = await fetch(`/api/runs/${enc(runId)}/commands/`, {method: "POST", credentials: "same-origin",
        headers: {"Content-Type": "application/json", "X-CSRFToken": token}, body: JSON.stringify(body)});
    } catch (e) { // the request may or may not have arrived: the same id again can never apply it twice
      if (attempt < 3) {
        await new Promise((ok) => setTimeout(ok, 1000 * (attempt + 1)));
        return post(runId, body, attempt + 1);
      }
      $("op-error").textContent = "could not reach the server; the command's id is kept, retry from the list";
      return null;
    }
    const out = await r.json().catch(() => ({}));
    if (!r.ok) $("op-error").textContent = out.error || `error ${r.status}`;
    refreshSoon();
    return r.ok ? out : null;
  }

  $("op-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const sent = formFor, [runId, name] = sent.split("/");
    const spec = specs.get(name), reason = $("op-reason").value.trim(), args = collectArgs(spec);
    $("op-error").textContent = "";
    if (!reason) { $("op-error").textContent = "give a reason: it is published with the command"; return; }
    if (spec.destructive && !$("op-confirm").checked) {
      $("op-error").textContent = `confirm the ${name} first`;
      return;
    }
    // the id is made here, once: a retry of this request (network trouble) can never become a second command
    const id = "web-" + Array.from(crypto.getRandomValues(new Uint8Array(12)),
                                   (b) => b.toString(16).padStart(2, "0")).join("");
    $("op-send").disabled = true;
    const ok = await post(runId, {id, command: name, args, reason, confirm: spec.destructive ? true : undefined});
    $("op-send").disabled = false;
    // done with this form (its preview, a band or a plan, no longer describes anything), unless the operator
    // has opened another command's form while the answer was on its way
    if (ok && formFor === sent) {
      $("op-reason").value = ""; $("op-confirm").checked = false;
      formFor = null; chart.preview = null; $("op-form").hidden = true; renderDetail();
    }
  });

  render();
  connect();
  setInterval(tickHeartbeats, 1000);
  setInterval(() => { if (chart.run && !document.hidden) chart.load(); }, 2000);
})();
