// The client's copy of a run's series: downsampled history from the JSON API, then live points from the WebSocket
// (webapp/live/protocol.py). Each series keeps the last step it holds; a (re)connect resumes from there and every
// point at or before it is dropped: no gap, no duplicate. Views attach to series and are told reset(series) after a
// history load or a rewind, added(series, points) for new points. A series the run does not have yet waits for
// Store.discover(name) rather than asking the API for a 404; Store.window() reads a zoomed chart's window.
"use strict";

// Extension points shared by the dashboard and feature modules (see dashboard.js and charts.js).
window.Obs = Object.assign(window.Obs || {}, {frameHandlers: {}, onStart: [], onEvents: []});

(function (Obs) {
  const WINDOW_BATCH = 32; // series per GET <run>/windows/ (the API's limit)
  const DEFAULT_CAP = 50000; // points held per series; past this it reloads its downsampled history
  const NONE = Object.freeze([]); // (no points of a kind in what a frame added)

  // An API window ({steps, values, nonfinite, ...}) split into finite points and non-finite marks.
  function parseWindow(data) {
    const out = {steps: [], values: [], nfSteps: [], nfKinds: [], bucketSteps: data.bucket_steps || 1};
    const c = data.nonfinite_counts;
    out.nfTotal = c.NaN + c.Infinity + c["-Infinity"];
    // all finite (the common case): copied whole, with no loop over the points (it ran cold before the first paint)
    if (!data.values.includes(null)) return {...out, steps: data.steps.slice(), values: data.values.slice()};
    const kinds = new Map(data.nonfinite.map(([step, kind]) => [step, kind]));
    for (let i = 0; i < data.steps.length; i++) {
      const v = data.values[i];
      if (v === null) { out.nfSteps.push(data.steps[i]); out.nfKinds.push(kinds.get(data.steps[i]) || "NaN"); }
      else { out.steps.push(data.steps[i]); out.values.push(v); }
    }
    return out;
  }

  // A packed windows answer (GET <run>/windows/?...&format=f64: webapp/metrics/api.py, packed_windows) -> {name:
  // API window or null}: a JSON header, then each window's steps and values as float64 columns (NaN: non-finite).
  function unpackWindows(buf) {
    const size = new DataView(buf).getUint32(0, true), cols = 4 + size + (8 - (4 + size) % 8) % 8;
    const head = JSON.parse(new TextDecoder().decode(new Uint8Array(buf, 4, size))).windows;
    for (const w of Object.values(head)) {
      if (!w) continue;
      const col = new Float64Array(buf, cols + w.at, 2 * w.n);
      w.steps = Array.from(col.subarray(0, w.n));
      w.values = Array.from(col.subarray(w.n), (v) => (Number.isNaN(v) ? null : v));
    }
    return head;
  }

  class Series {
    constructor(name) {
      this.name = name;
      this.steps = []; this.values = []; // finite points
      this.nfSteps = []; this.nfKinds = []; this.nfTotal = 0; // non-finite points (NaN / ±Infinity)
      this.last = -1; // last step held (finite or not)
      this.loading = false; this.loaded = false; this.missing = false;
      this.waiting = false; // the run has no such series yet: loaded once it appears
      this.queue = []; // live frames that arrived while the history was loading
      this.points = 0; // history resolution asked for
      this.tail = false; // only the latest values are wanted (history from the series' last stored step)
      this.cap = DEFAULT_CAP;
      this.bucketSteps = 1; // steps per bucket of the loaded history (1: exact)
      this.gen = 0; // history load generation: a superseded load is ignored
      this.views = new Set();
    }

    lastValue() { // [step, value | kind] of the latest point, or null
      const f = this.steps.length ? this.steps[this.steps.length - 1] : -1;
      const n = this.nfSteps.length ? this.nfSteps[this.nfSteps.length - 1] : -1;
      if (f < 0 && n < 0) return null;
      return f >= n ? [f, this.values[this.values.length - 1]] : [n, this.nfKinds[this.nfKinds.length - 1]];
    }
  }

  class Store {
    // apiBase: "/api/runs/<id>"; onReady(names): their history is in, subscribe them (send "resume").
    constructor(apiBase, onReady) {
      this.apiBase = apiBase;
      this.onReady = onReady;
      this.map = new Map();
      this.meta = new Map(); // name -> {last_step, count} from the metric list (used by tail loads)
      this.exists = null; // Set of the run's series names once the metric list is in (null: assume all exist)
      this.seeded = new Map(); // name -> a whole-run window the page came with (used once, by the first load)
    }

    // Windows inlined into the page ({name: API window}): a first load at no more points than one holds uses it
    // instead of reading the API (webapp/metrics/firstpaint.py).
    seed(windows) { for (const [name, w] of Object.entries(windows || {})) this.seeded.set(name, w); }

    get(name) { return this.map.get(name); }
    has(name) { return this.map.has(name); }
    all() { return this.map.values(); }

    // The run has series `name` (metric list, a live frame): load it if a view is waiting for it.
    discover(name) {
      if (!this.exists) this.exists = new Set();
      if (this.exists.has(name)) return;
      this.exists.add(name);
      const s = this.map.get(name);
      if (s && s.waiting) { s.waiting = false; this.load(s); }
    }

    // Attach `view` to series `name`, loading history at >= `points` (or only its tail) as needed.
    want(name, view, {points = 2000, tail = false, cap = DEFAULT_CAP} = {}) {
      let s = this.map.get(name);
      const fresh = !s;
      if (fresh) {
        s = new Series(name);
        s.tail = tail; s.points = points; s.cap = cap;
        this.map.set(name, s);
      }
      s.views.add(view);
      if (fresh) { this.load(s); return s; }
      let reload = false;
      if (s.tail && !tail) { s.tail = false; reload = true; }
      if (!s.tail && points > s.points) { s.points = points; reload = true; }
      s.cap = Math.max(s.cap, cap);
      if (reload) this.load(s);
      return s;
    }

    // Detach a view; a series no view needs is dropped (live frames for it are then ignored).
    release(name, view) {
      const s = this.map.get(name);
      if (s && s.views.delete(view) && !s.views.size) { this.map.delete(name); s.gen++; }
    }

    // Names whose history is in: what a (re)connect resumes.
    ready() { return [...this.map.values()].filter((s) => !s.loading && !s.waiting).map((s) => s.name); }

    // One series' window: through the batch endpoint, which answers null for a series not stored yet (a live frame
    // can name a series before ingest has committed it: the live log is written first; a 404 is a console error).
    url(name, query) { return this.apiBase + "/windows/?" + query + "&series=" + encodeURIComponent(name); }

    async load(s) {
      if (this.exists && !this.exists.has(s.name)) { s.waiting = true; s.loaded = true; return; }
      s.loading = true; s.waiting = false;
      const gen = ++s.gen, current = () => gen === s.gen && this.map.get(s.name) === s; // (not superseded, dropped)
      const seeded = this.seeded.get(s.name);
      if (seeded && !s.tail && s.points <= seeded.points) {
        this.seeded.delete(s.name);
        await null; // as asynchronous as a read: the caller finishes setting up first
        if (current()) this.setHistory(s, seeded);
        return;
      }
      let query = "points=" + (s.tail ? 10 : s.points);
      const meta = this.meta.get(s.name);
      if (s.tail && meta && meta.last_step != null) query += "&start=" + meta.last_step;
      try {
        const r = await fetch(this.url(s.name, query));
        if (!current()) return;
        if (r.status === 404) { this.setHistory(s, null); return; }
        if (!r.ok) throw new Error("HTTP " + r.status);
        const data = (await r.json()).windows[s.name];
        if (current()) this.setHistory(s, data || null);
      } catch (e) {
        console.warn("history of", s.name, "failed:", e);
        setTimeout(() => { if (current()) this.load(s); }, 2000);
      }
    }

    // One step window of a series at `points` resolution (a zoomed chart's view); `signal` cancels it. Windows
    // asked for together (a zoom: every chart at once) with the same bounds go in one request
    // (GET <run>/windows/?series=a,b,...); a cancelled caller stops waiting, the others still get theirs.
    window(name, start, end, points, signal) {
      const q = `start=${Math.max(0, Math.floor(start))}&end=${Math.max(0, Math.ceil(end))}&points=${points}`;
      this.batches = this.batches || new Map();
      let batch = this.batches.get(q);
      if (!batch) {
        batch = {names: new Map()};
        this.batches.set(q, batch);
        // a microtask: every chart of a zoom asks in the same task (the view's change), and the request leaves
        // before anything is drawn
        queueMicrotask(() => { this.batches.delete(q); this.readBatch(q, batch); });
      }
      return new Promise((resolve, reject) => {
        if (signal) {
          if (signal.aborted) { reject(new DOMException("aborted", "AbortError")); return; }
          signal.addEventListener("abort", () => reject(new DOMException("aborted", "AbortError")), {once: true});
        }
        if (!batch.names.has(name)) batch.names.set(name, []);
        batch.names.get(name).push({resolve, reject, signal});
      });
    }

    async readBatch(q, batch) {
      // (a series whose every caller has cancelled already — the same task zoomed again — is not read)
      const names = [...batch.names.keys()]
        .filter((n) => batch.names.get(n).some((w) => !w.signal || !w.signal.aborted));
      const fail = (e) => batch.names.forEach((ws) => ws.forEach((w) => w.reject(e)));
      for (let i = 0; i < names.length; i += WINDOW_BATCH) { // the API takes at most 32 series a request
        const part = names.slice(i, i + WINDOW_BATCH);
        try {
          const names = part.map(encodeURIComponent).join(",");
          const r = await fetch(`${this.apiBase}/windows/?${q}&series=${names}&format=f64`);
          if (!r.ok) throw new Error("HTTP " + r.status);
          const got = unpackWindows(await r.arrayBuffer());
          for (const n of part) {
            const w = got[n] ? parseWindow(got[n]) : null;
            batch.names.get(n).forEach((waiter) => waiter.resolve(w));
          }
        } catch (e) { fail(e); return; }
      }
    }

    setHistory(s, data) {
      const w = data ? parseWindow(data) : Obs.emptyWindow();
      Object.assign(s, {steps: w.steps, values: w.values, nfSteps: w.nfSteps, nfKinds: w.nfKinds, nfTotal: w.nfTotal,
                        bucketSteps: w.bucketSteps, last: data && data.end !== null ? data.end : -1,
                        missing: !data, loading: false, loaded: true});
      s.views.forEach((v) => v.reset(s));
      const queued = s.queue; s.queue = [];
      for (const [op, arg] of queued) op === "rewind" ? this.rewindOne(s, arg) : this.append(s, arg);
      this.onReady([s.name]);
    }

    reload(name) { const s = this.map.get(name); if (s) this.load(s); }

    rewind(toStep) { this.map.forEach((s) => this.rewindOne(s, toStep)); }

    rewindOne(s, toStep) {
      if (s.loading) { s.queue.push(["rewind", toStep]); return; }
      if (s.last <= toStep) return;
      s.nfTotal -= s.nfSteps.length - Obs.lowerBound(s.nfSteps, toStep + 1); // (integer steps)
      Obs.cutAfter(s, toStep); // (chartmodel.js)
      s.last = toStep;
      s.views.forEach((v) => v.reset(s, toStep));
    }

    // A SERIES frame for `name` (update or backfill); ignored for series no view holds.
    apply(name, frame) { const s = this.map.get(name); if (s) this.append(s, frame); }

    // A frame's points onto the series (those past its last step), then its views told what was added. The usual
    // frame (every point new and finite) is told as the frame's own arrays: nothing copied a series a step (views
    // read `add`, never change it).
    append(s, frame) {
      if (s.loading || s.waiting) { s.queue.push(["series", frame]); return; }
      const kinds = frame.nonfinite && frame.nonfinite.length ? new Map(frame.nonfinite) : null; // [[step, kind]]
      const {steps, values} = frame;
      let taken = 0, finite = 0;
      for (let i = 0; i < steps.length; i++) {
        const step = steps[i];
        if (step <= s.last) continue; // already held: resume/live overlap
        const v = values[i];
        taken++;
        if (v === null) {
          s.nfSteps.push(step); s.nfKinds.push((kinds && kinds.get(step)) || "NaN"); s.nfTotal++;
        } else {
          s.steps.push(step); s.values.push(v); finite++;
        }
        s.last = step;
      }
      const nf = taken - finite, last = (arr, n) => arr.slice(arr.length - n);
      const add = finite === steps.length ? {x: steps, y: values, nfx: NONE, nfk: NONE}
        : {x: last(s.steps, finite), y: last(s.values, finite), nfx: last(s.nfSteps, nf), nfk: last(s.nfKinds, nf)};
      s.missing = false;
      if (add.x.length || add.nfx.length) s.views.forEach((v) => v.added(s, add));
      if (s.steps.length + s.nfSteps.length > s.cap) this.load(s);
    }
  }

  Obs.Store = Store;
  Obs.emptyWindow = () => ({steps: [], values: [], nfSteps: [], nfKinds: [], nfTotal: 0, bucketSteps: 1});
  Obs.slug = (name) => name.replace(/[^A-Za-z0-9]+/g, "-");
})(window.Obs);
