// The data panel: the run's data manifest (domains, sources, sizes, stages and their mixture weights) with the
// current stage and the live mixture weights (mixture/stage, mixture/weight/<domain>) over Obs.Store series.
"use strict";

(function (Obs) {
  const bytes = (n) => n == null ? "–" : n >= 1e9 ? (n / 1e9).toFixed(2) + " GB"
    : n >= 1e6 ? (n / 1e6).toFixed(2) + " MB" : n >= 1e3 ? (n / 1e3).toFixed(1) + " kB" : n + " B";
  const {count, el} = Obs; // (plotkit.js)

  const weightCell = (w, cls) => setWeight(el("td", {class: "num weight " + (cls || "")}), w);

  function setWeight(td, w) { // a weight cell's bar and percentage (written only where they change)
    if (typeof w !== "number" || !isFinite(w)) {
      if (td.querySelector(".bar")) td.replaceChildren();
      Obs.put(td, w == null ? "–" : String(w));
      return td;
    }
    if (!td.querySelector(".bar")) td.replaceChildren(el("span", {class: "bar"}), el("span", {class: "pct"}));
    const width = (Math.max(0, Math.min(1, w)) * 100).toFixed(1) + "%";
    if (td.firstChild.style.width !== width) td.firstChild.style.width = width;
    Obs.put(td.lastChild, (w * 100).toFixed(1) + "%");
    return td;
  }

  class DataPanel {
    constructor(ctx, names) {
      this.ctx = ctx;
      this.stageName = names.stage;
      this.weightPrefix = names.weight_prefix;
      this.manifest = null;
      this.domains = []; // names, manifest order then any only seen in mixture/weight/*
      this.stage = null; // Series
      this.weights = new Map(); // domain -> Series
      this.dirty = false;
      this.section = document.getElementById("data-panel");
      // Its live weights are written only while it is on screen (caught up when scrolled into view): a change of
      // one lays the whole table out again.
      this.seen = Obs.watchSeen(this.section, (seen) => {
        this.seen = seen;
        if (seen && this.liveStale) this.touch();
      });
    }

    hasManifest() { return !!(this.manifest && Object.keys(this.manifest).length); }

    setManifest(m) {
      if (!m || !Object.keys(m).length) return;
      this.manifest = m;
      for (const d of m.domains || []) this.addDomain(d.name);
      this.watchStage();
      this.touch();
    }

    // A series name the run has: mixture/stage or mixture/weight/<domain>.
    discover(name) {
      if (name === this.stageName) { this.watchStage(); this.touch(); }
      else if (name.startsWith(this.weightPrefix) && !name.slice(this.weightPrefix.length).includes("/")) {
        this.addDomain(name.slice(this.weightPrefix.length));
        this.touch();
      }
    }

    watchStage() { if (!this.stage) this.stage = this.ctx.store.want(this.stageName, this, {tail: true}); }

    addDomain(d) {
      if (!this.domains.includes(d)) this.domains.push(d);
      if (!this.weights.has(d)) this.weights.set(d, this.ctx.store.want(this.weightPrefix + d, this, {tail: true}));
    }

    touch() { this.dirty = true; this.ctx.schedule(); }
    reset() { this.touch(); }
    added() { this.touch(); }

    currentStage() {
      const lv = this.stage && this.stage.lastValue();
      return lv && typeof lv[1] === "number" ? Math.round(lv[1]) : null;
    }

    liveWeight(domain) {
      const lv = this.weights.get(domain)?.lastValue();
      return lv ? lv[1] : null;
    }

    stageLabel() { // "pretrain (1 of 2)", for the run header
      const cur = this.currentStage(), stages = (this.manifest && this.manifest.stages) || [];
      if (cur === null) return null;
      return (stages[cur] ? stages[cur].name : "stage " + cur)
        + (stages.length ? ` (${cur + 1} of ${stages.length})` : "");
    }

    redraw() {
      if (!this.dirty) return;
      this.dirty = false;
      if (!this.hasManifest() && !this.domains.length) return;
      this.section.hidden = false;
      const m = this.manifest || {};
      const stages = m.stages || [];
      const cur = this.currentStage();
      const byName = new Map((m.domains || []).map((d) => [d.name, d]));

      const stageEl = document.getElementById("data-stage");
      Obs.putAttr(stageEl, "data-stage", cur === null ? "" : cur);
      Obs.put(stageEl, this.stageLabel() || (stages.length ? "not started" : "–"));
      // A live update moves the live weights only: the table is built again only when its shape changes (the
      // manifest, the domains, the current stage); otherwise the "weight now" cells are rewritten where they changed.
      const shape = [this.manifest, this.domains.length, cur];
      if (this.shape && this.shape.every((v, i) => v === shape[i])) {
        this.liveStale = !this.seen;
        if (this.liveStale) return;
        for (const [name, td] of this.liveCells) setWeight(td, this.liveWeight(name));
        return;
      }
      this.shape = shape;
      this.liveCells = new Map();

      const tk = m.tokenizer, facts = [ // [label, its text or nothing]
        ["tokenizer", tk && tk.name + (tk.vocab_size ? ` (vocab ${tk.vocab_size})` : "")],
        ["sequence", m.seq_len && m.seq_len + " tokens"], ["batch", m.batch_size && String(m.batch_size)],
        ["token budget", m.token_budget && count(m.token_budget)], ["seed", m.seed !== undefined && String(m.seed)],
        ["loaded in", typeof m.load_seconds === "number" && m.load_seconds.toFixed(2) + " s"]];
      document.getElementById("data-facts").replaceChildren(
        ...facts.filter(([, v]) => v).map(([k, v]) => el("span", {class: "stat"}, k + " ", el("b", {text: v}))));

      const head = el("tr", {}, el("th", {text: "domain"}), el("th", {text: "sources"}),
                      el("th", {class: "num", text: "documents"}), el("th", {class: "num", text: "size"}),
                      el("th", {class: "num", text: "tokens"}),
                      ...stages.map((st, i) => el("th", {class: "num stage" + (i === cur ? " current" : ""),
                        "data-stage-index": i, title: `${(st.fraction * 100).toFixed(0)}% of the budget: ` +
                          `tokens ${count(st.start_tokens)}–${count(st.end_tokens)}`},
                        st.name, el("br"), el("span", {class: "muted",
                                                       text: (st.fraction * 100).toFixed(0) + "% of tokens"}))),
                      el("th", {class: "num live", text: "weight now"}));
      const rows = this.domains.map((name) => {
        const d = byName.get(name) || {name};
        const src = el("ul", {class: "sources"}, ...(d.sources || []).map((s) =>
          el("li", {text: `${s.kind}: ${s.pattern}` + (s.files !== undefined ? ` · ${s.files} files` : "") +
                          (s.bytes !== undefined ? ` · ${bytes(s.bytes)}` : "")})));
        const tr = el("tr", {"data-domain": name},
          el("td", {}, el("b", {text: name}), d.builtin ? el("span", {class: "muted", text: " built-in"}) : null),
          el("td", {}, src),
          el("td", {class: "num", text: count(d.documents)}),
          el("td", {class: "num", text: bytes(d.bytes)}),
          el("td", {class: "num", text: count(d.tokens), title: d.train_tokens !== undefined ?
                    `train ${d.train_tokens}, eval ${d.eval_tokens}` : ""}));
        stages.forEach((st, i) => tr.append(weightCell((st.weights || {})[name], i === cur ? "current" : "")));
        const live = weightCell(this.liveWeight(name), "live");
        this.liveCells.set(name, live);
        tr.append(live);
        return tr;
      });
      document.getElementById("data-domains").replaceChildren(el("thead", {}, head), el("tbody", {}, ...rows));
    }
  }

  Obs.DataPanel = DataPanel;
})(window.Obs);
