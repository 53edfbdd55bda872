// Real zoom for line charts (a part of Obs.LineChart): every zoom or pan — a drag, the toolbar, the step fields,
// a shared URL, another chart — reads the visible window of each downsampled series from the API at the chart's
// pixel width (each bucket's min and max at their true steps, raw points once the window holds few enough),
// cancelling stale reads; an off-screen chart (drawn or not yet) does it once scrolled into view. The read leaves at
// once (every chart's in one request: Store.window); each chart redraws with its window as soon as it is in, in that
// task, not at the next animation frame (a canvas redraw, a millisecond or two), the y axis fitted to the window.
"use strict";

(function (Obs) {
  Object.assign(Obs.LineChart.prototype, {
    // A drag-zoom (x range in axis units) or a double-click ({"xaxis.autorange": true}: the whole run).
    relayouted(ev) {
      const xa = this.ctx.xaxis;
      if (ev["xaxis.autorange"]) { this.ctx.zoomTo(null); return; }
      const r = ev["xaxis.range"];
      if (r) this.ctx.zoomTo([xa.toStep(r[0]), xa.toStep(r[1])], this);
    },

    // The view's range changed (this chart or another was zoomed, the URL, the step fields). A chart whose
    // history is not exact reads the window first and redraws with the finer points.
    setRange() {
      if (this.abort) { this.abort.abort(); this.abort = null; }
      this.stale = this.observed && !this.visible; // (drawn or not yet; not observed yet: it may be in view)
      if (this.stale) return; // off screen: redrawn (and its window read) once scrolled into view
      this.rangeRev++;
      this.zoomPending = !!this.ctx.view.range;
      this.fetching = false;
      if (!this.ctx.view.range) this.items.forEach((it) => { it.zoom = null; });
      else if (this.coarse().length) { this.fetchZoom(); return; }
      this.full = true; this.dirty = true; this.ctx.schedule();
    },

    coarse() { // items whose held history is downsampled: a zoomed view needs their window's finer points
      return this.items.filter((it) => it.series && it.series.loaded && !it.series.waiting && !it.series.missing &&
                                       it.series.bucketSteps > 1 && this.drawable(it));
    },

    async fetchZoom() {
      const range = this.ctx.view.range;
      if (!range) return;
      this.fetching = true;
      const ac = this.abort = new AbortController();
      const pts = this.resolution(), need = this.coarse();
      try {
        const got = await Promise.all(need.map((it) => this.readWindow(it, range, pts, ac.signal)));
        if (ac !== this.abort) return;
        this.items.forEach((it) => { it.zoom = null; });
        need.forEach((it, i) => { if (got[i]) it.zoom = got[i]; });
      } catch (e) {
        if (e.name === "AbortError") return;
        console.warn("zoom of", this.id, "failed:", e); // drawn from the coarse history instead
      }
      this.abort = null; this.fetching = false;
      this.full = true; this.dirty = true;
      this.redraw(); // now (off screen, or its history loading: drawn once seen, or by its reset())
    },

    // One item's finer points over the view's range (mapped to the item's steps: stepOf, a compare chart's x
    // units), read at `pts` resolution: the window with its step bounds {…, from, to}, or null.
    async readWindow(it, range, pts, signal) {
      const [s0, s1] = range.map((x) => this.stepOf(it, x));
      if (!Number.isFinite(s0) || !Number.isFinite(s1)) return null;
      const a = Math.max(0, Math.floor(Math.min(s0, s1))), b = Math.max(0, Math.ceil(Math.max(s0, s1)));
      const w = await it.store.window(it.metric, a, b, pts, signal);
      return w && {...w, from: a, to: b};
    },
  });
})(window.Obs);
