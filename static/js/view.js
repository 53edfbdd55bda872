// What the dashboard shows and how to name it: the metric registry (observatory.contract.registry(), in the page
// data), the view state (charts, step range, x axis, log axes, smoothing) kept in the URL and localStorage so a link
// reproduces it, and the x axis, mapping steps to tokens or wall time and back.
"use strict";

(function (Obs) {
  // ------------------------------------------------------------------------------------------ registry
  class Registry {
    constructor(reg) {
      this.reg = reg || {fixed: {}, titles: [], infos: [], groups: [], topics: [], glossary: {}};
      const re = (list) => list.map(([src, v]) => [new RegExp(src), v]);
      this.titles = re(this.reg.titles); this.infos = re(this.reg.infos); this.topics = re(this.reg.topics);
      this.cache = new Map();
    }

    // {name, title, unit, meaning, group, topic, glossary} for any series name (unregistered: its own name).
    info(name) {
      let out = this.cache.get(name);
      if (out) return out;
      const fixed = this.reg.fixed[name];
      let title = fixed ? fixed.title : null, base = fixed || null;
      if (!title) {
        for (const [re, fmt] of this.titles) {
          const m = re.exec(name);
          if (m) { title = fmt.replace("{1}", m[1] || "").replace("{2}", m[2] || ""); break; }
        }
      }
      if (!base) base = (this.infos.find(([re]) => re.test(name)) || [null, {}])[1];
      const grp = this.reg.groups.find(([prefix]) => name.startsWith(prefix));
      const topic = (this.topics.find(([re]) => re.test(name)) || [null, null])[1];
      out = {name, title: title || name, unit: base.unit || "", meaning: base.meaning || "",
             group: grp ? grp[1] : "Other", topic, glossary: topic ? this.reg.glossary[topic] : ""};
      this.cache.set(name, out);
      return out;
    }

    glossary(topic) { return (topic && this.reg.glossary[topic]) || ""; }
  }

  // ------------------------------------------------------------------------------------------ view state
  const STORAGE_KEY = "obs.dashboard.view";
  const X_MODES = ["step", "tokens", "time"];
  const SAVE_WAIT_MS = 1000; // a zoom's URL waits at most this long for its charts to be drawn (View.set(…, later))

  class View {
    // defaults: chart ids in order. The URL wins over localStorage; the range is only ever in the URL.
    // storageKey: where the layout is remembered (null: nowhere, the URL alone holds the view — compare.js).
    constructor(defaults, storageKey = STORAGE_KEY) {
      this.listeners = [];
      this.storageKey = storageKey;
      let saved = {};
      try { saved = (storageKey && JSON.parse(localStorage.getItem(storageKey))) || {}; } catch (e) { /* as none */ }
      const q = new URLSearchParams(location.search);
      const list = (k) => q.getAll(k).filter(Boolean);
      this.charts = list("chart").length ? list("chart")
        : (Array.isArray(saved.charts) ? saved.charts : defaults.slice());
      this.x = X_MODES.includes(q.get("x")) ? q.get("x") : (X_MODES.includes(saved.x) ? saved.x : "step");
      this.log = new Set(q.has("log") ? list("log") : (Array.isArray(saved.log) ? saved.log : []));
      const sm = parseFloat(q.has("smooth") ? q.get("smooth") : saved.smooth);
      this.smooth = Number.isFinite(sm) ? Math.min(0.99, Math.max(0, sm)) : 0;
      const from = parseInt(q.get("from"), 10), to = parseInt(q.get("to"), 10);
      this.range = Number.isFinite(from) && Number.isFinite(to) && to > from ? [from, to] : null;
    }

    onChange(fn) { this.listeners.push(fn); }

    // Apply a change ({charts, x, log, smooth, range}) and tell listeners which keys changed.
    // The URL and localStorage follow a moment later (history.replaceState costs ~5-25 ms on a busy box: a zoom's
    // window reads are on their way first). `later`: once the caller says (saveSoon(): a zoom, when its charts are
    // drawn, so that the save cannot hold up the answer's redraw), SAVE_WAIT_MS at the latest.
    set(change, later = false) {
      const keys = Object.keys(change);
      Object.assign(this, change);
      this.listeners.forEach((fn) => fn(keys));
      if (later) this.saveSoon(SAVE_WAIT_MS);
      else if (!this.saving) this.saveSoon(0);
    }

    saveSoon(ms = 0) {
      clearTimeout(this.saving);
      this.saving = setTimeout(() => { this.saving = null; this.save(); }, ms);
    }

    toggleLog(id) {
      const log = new Set(this.log);
      log.has(id) ? log.delete(id) : log.add(id);
      this.set({log});
    }

    query() {
      const q = new URLSearchParams(location.search);
      for (const k of ["chart", "x", "log", "smooth", "from", "to"]) q.delete(k);
      for (const c of this.charts) q.append("chart", c);
      if (this.x !== "step") q.set("x", this.x);
      for (const l of this.log) if (this.charts.includes(l)) q.append("log", l);
      if (this.smooth > 0) q.set("smooth", String(this.smooth));
      if (this.range) { q.set("from", String(Math.floor(this.range[0]))); q.set("to",
        String(Math.ceil(this.range[1]))); }
      return q;
    }

    url() { return location.pathname + "?" + this.query().toString() + location.hash; }

    save() {
      history.replaceState(history.state, "", this.url());
      if (!this.storageKey) return;
      try {
        localStorage.setItem(this.storageKey, JSON.stringify({charts: this.charts, x: this.x, log: [...this.log],
                                                          smooth: this.smooth}));
      } catch (e) { /* private mode: the URL still holds the view */ }
    }
  }

  // ------------------------------------------------------------------------------------------ x axis
  // Piecewise-linear map over sorted anchors (xs ascending, ys non-decreasing), extrapolated at both ends.
  function interp(xs, ys, x, slope) {
    const n = xs.length;
    if (!n) return x * slope;
    if (n === 1) return ys[0] + (x - xs[0]) * slope;
    let i = Obs.lowerBound(xs, x);
    if (i <= 0) i = 1; else if (i >= n) i = n - 1;
    const x0 = xs[i - 1], x1 = xs[i], y0 = ys[i - 1], y1 = ys[i];
    return x1 === x0 ? y1 : y0 + (x - x0) * (y1 - y0) / (x1 - x0);
  }

  class XAxis {
    // page: the page data (time_anchors, tokens_metric); store: the run's Store (the tokens series).
    constructor(store, page, onChange) {
      this.store = store;
      this.tokensMetric = page.tokens_metric;
      this.onChange = onChange;
      this.mode = "step";
      this.anchors = (page.time_anchors || []).map(([s, t]) => [s, t * 1000]);
      this.tokens = null; // Store series of cumulative tokens, wanted while the mode is "tokens"
    }

    available() {
      const times = new Set(this.anchors.map((a) => a[1]));
      return {step: true, tokens: !!(this.store.exists && this.store.exists.has(this.tokensMetric)),
              time: times.size >= 2};
    }

    setMode(mode) {
      if (!this.available()[mode]) mode = "step";
      this.mode = mode;
      if (mode === "tokens" && !this.tokens) this.tokens = this.store.want(this.tokensMetric, this, {points: 2000});
      return mode;
    }

    // A view of the tokens series: its history (re)loaded redraws the charts when tokens are the x axis; live
    // points need nothing (steps past the last known one are extrapolated at the current tokens per step).
    reset() { if (this.mode === "tokens") this.onChange(); }
    added() {}

    // A live event or heartbeat: (step, unix seconds) for the time axis; going back forgets later steps.
    anchor(step, t) {
      if (!Number.isFinite(step) || !Number.isFinite(t)) return;
      const a = this.anchors, ms = t * 1000;
      if (a.length && ms <= a[a.length - 1][1]) return; // not newer than what the page has: already known
      while (a.length && a[a.length - 1][0] >= step) a.pop(); // the run went back: those steps are redone
      a.push([step, ms]);
    }

    pairs() {
      if (this.mode === "time") return [this.anchors.map((a) => a[0]), this.anchors.map((a) => a[1])];
      const s = this.tokens;
      return s ? [s.steps, s.values] : [[], []];
    }

    slope() { // x units per step beyond the anchors
      const [xs, ys] = this.pairs();
      const n = xs.length;
      if (n >= 2 && xs[n - 1] > xs[0]) return (ys[n - 1] - ys[0]) / (xs[n - 1] - xs[0]);
      return 1;
    }

    toX(steps) {
      if (this.mode === "step") return steps.slice(); // a trace's own array (extendTraces appends in place)
      const [xs, ys] = this.pairs(), k = this.slope();
      return steps.map((s) => interp(xs, ys, s, k));
    }

    xOf(step) { // one step's x (toX's, without arrays: marks ask for hundreds at a time)
      if (this.mode === "step") return step;
      const [xs, ys] = this.pairs();
      return interp(xs, ys, step, this.slope());
    }

    toStep(x) {
      if (this.mode === "step") return x;
      if (this.mode === "time" && typeof x === "string") x = Date.parse(x.replace(" ", "T") + "Z");
      const [xs, ys] = this.pairs(), k = this.slope();
      return interp(ys, xs, x, k ? 1 / k : 1);
    }

    title() { return {step: "step", tokens: "tokens trained", time: "wall time (UTC)"}[this.mode]; }
    axisType() { return this.mode === "time" ? "date" : "linear"; }
  }

  // ------------------------------------------------------------------------------------------ page controls
  // What the dashboard and the compare page share around their charts (templates/runs/_view_controls.html).
  const $ = (id) => document.getElementById(id);

  // A visible range from a drag or the fields: whole units, ordered, at least one wide (null stays null).
  Obs.wholeRange = (range) => {
    if (!range) return null;
    const r = [Math.max(0, Math.floor(Math.min(range[0], range[1]))), Math.ceil(Math.max(range[0], range[1]))];
    if (r[1] <= r[0]) r[1] = r[0] + 1;
    return r;
  };

  // The "add a chart" picker (picker.js): a chosen metric's chart goes last and is scrolled to.
  Obs.chartPicker = (registry, view, charts) => new Obs.Picker(registry, (name) => charts.has(name), (name) => {
    view.set({charts: [...view.charts.filter((c) => c !== name), name]});
    charts.get(name)?.box.scrollIntoView({block: "nearest"});
  });

  // Screen-reader announcements for actions whose result is not where focus is.
  Obs.announce = (text) => { const el = $("announce"); el.textContent = "";
    setTimeout(() => { el.textContent = text; }, 50); };

  // A chart's "remove" / "up" / "down" button: the view's new chart list; the moved chart keeps the keyboard's place.
  Obs.moveChart = (view, charts, id, action, title) => {
    const list = view.charts.slice(), i = list.indexOf(id), j = action === "up" ? i - 1 : i + 1;
    if (i < 0 || (action !== "remove" && (j < 0 || j >= list.length))) return; // (nothing to move)
    if (action === "remove") list.splice(i, 1); else [list[i], list[j]] = [list[j], list[i]];
    view.set({charts: list});
    const ch = charts.get(id), btn = ch && ch.box.querySelector(action === "up" ? ".up" : ".down");
    if (btn) btn.focus(); else $("metric-search").focus();
    Obs.announce(action === "remove" ? `Chart ${title} removed` : `Chart moved ${action}`);
  };

  // The x axis buttons, the smoothing slider, the range fields and the view's link. zoomTo(range | null); parse: a
  // field's number; bad: the notice for a range that is none; pickX(mode): an x axis button pressed. Returns
  // show(mode, why): the controls from the view, `mode` the x axis shown, why(mode) why a mode cannot be (or "").
  Obs.viewControls = (view, zoomTo, parse, bad, pickX) => {
    const xButtons = document.querySelectorAll("#x-mode button");
    xButtons.forEach((b) => b.addEventListener("click", () => pickX(b.value)));
    let smoothTimer = null; // the slider is being moved (its value not yet the view's)
    const said = (v) => { $("smooth-out").textContent = v > 0 ? v.toFixed(2) : "off"; };
    $("smooth").addEventListener("input", () => {
      said(+$("smooth").value);
      clearTimeout(smoothTimer); // dragging the slider redraws once it rests
      smoothTimer = setTimeout(() => { smoothTimer = null; view.set({smooth: +$("smooth").value}); }, 120);
    });
    $("range-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      const a = parse($("range-from").value), b = parse($("range-to").value);
      if (Number.isFinite(a) && Number.isFinite(b) && b > a) zoomTo([a, b]); else Obs.toast(bad, "warning");
    });
    $("range-reset").addEventListener("click", () => zoomTo(null));
    $("copy-link").addEventListener("click", async () => {
      const url = location.origin + view.url();
      try { await navigator.clipboard.writeText(url); Obs.toast("Link to this view copied.", "info"); }
      catch (e) { window.prompt("Copy this link:", url); }
    });
    return (mode, why) => {
      xButtons.forEach((b) => {
        b.setAttribute("aria-pressed", String(b.value === mode));
        b.title = why(b.value);
        b.disabled = !!b.title;
      });
      if (!smoothTimer) { $("smooth").value = view.smooth; said(view.smooth); }
      $("range-from").value = view.range ? view.range[0] : "";
      $("range-to").value = view.range ? view.range[1] : "";
      $("range-reset").disabled = !view.range;
    };
  };

  Obs.Registry = Registry;
  Obs.View = View;
  Obs.XAxis = XAxis;
})(window.Obs);
