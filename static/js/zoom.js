// Real zoom for line charts (a part of Obs.LineChart): every zoom or pan — a drag, the toolbar, the step fields,
// a shared URL, another chart — reads the visible window of each downsampled series from the API at the chart's
// pixel width (each bucket's min and max at their true steps, raw points once the window holds few enough),
// debounced and cancelling stale reads; an off-screen chart does it once scrolled into view.
"use strict";

(function (Obs) {
  const ZOOM_DEBOUNCE_MS = 0; // a burst of relayouts in one task (every chart relayouted at once) reads once

  Object.assign(Obs.LineChart.prototype, {
    // A relayout of this chart: a drag-zoom, a pan, the toolbar, a double-click (autorange: the whole run).
    relayouted(ev) {
      const xa = this.ctx.xaxis;
      if (ev["xaxis.autorange"]) { this.ctx.zoomTo(null); return; }
      let r = ev["xaxis.range"];
      if (!r && "xaxis.range[0]" in ev) r = [ev["xaxis.range[0]"], ev["xaxis.range[1]"]];
      if (!r) return;
      this.ctx.zoomTo([xa.toStep(r[0]), xa.toStep(r[1])], this);
    },

    // The view's range changed (this chart or another was zoomed, the URL, the step fields). A chart whose
    // history is not exact reads the window first and redraws once, with the finer points; one the user dragged
    // already shows the range meanwhile.
    setRange() {
      clearTimeout(this.fetchTimer);
      if (this.abort) { this.abort.abort(); this.abort = null; }
      this.stale = !this.visible && this.lastFull > 0;
      if (this.stale) return; // off screen: redrawn (and its window read) once scrolled into view
      this.rangeRev++; this.liveOnly = false;
      this.zoomPending = !!this.ctx.view.range;
      this.fetching = false;
      if (!this.ctx.view.range) this.items.forEach((it) => { it.zoom = null; });
      else if (this.coarse().length) {
        this.fetching = true;
        this.fetchTimer = setTimeout(() => this.fetchZoom(), ZOOM_DEBOUNCE_MS);
        return;
      }
      this.full = true; this.dirty = true; this.ctx.schedule();
    },

    coarse() { // items whose held history is downsampled: a zoomed view needs their window's finer points
      return this.items.filter((it) => it.series && it.series.loaded && !it.series.waiting && !it.series.missing &&
                                       it.series.bucketSteps > 1);
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
      this.full = true; this.dirty = true; this.ctx.schedule();
    },

    // One item's finer points over the view's range (steps; a compare chart maps its x units to each run's
    // steps): the window with its step bounds {…, from, to}, or null.
    async readWindow(it, range, pts, signal) {
      const a = Math.max(0, Math.floor(range[0])), b = Math.max(0, Math.ceil(range[1]));
      const w = await this.ctx.store.window(it.name, a, b, pts, signal);
      return w && {...w, from: a, to: b};
    },
  });
})(window.Obs);
