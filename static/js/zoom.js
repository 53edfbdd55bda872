// Real zoom for line charts (a part of Obs.LineChart): every zoom or pan — a drag, the toolbar, the step fields,
// a shared URL, another chart — reads the visible window of each downsampled series from the API at the chart's
// pixel width (each bucket's min and max at their true steps, raw points once the window holds few enough),
// cancelling stale reads; an off-screen chart does it once scrolled into view.
// The zoom's critical path, from the gesture to every chart drawn with its window: the read leaves at once (every
// chart's in one request); while it is on its way each Plotly chart takes the new range from the points it already
// draws (preview: a Plotly.react with the drawn traces as they are, so Plotly redraws axes, not data); when the
// window is in, its finer points are written onto the drawn lines in Plotly's axes (drawWindow: ~1 ms a chart, not
// a ~20-50 ms Plotly redraw each, one after another), and Plotly's own redraw (hover, the y axis fitted to the new
// points, the marks' labels) follows in the next animation frames. Whatever drawWindow cannot show exactly as
// Plotly would (marks or impossible values that change, smoothing, a log or time axis, a pointer over the chart,
// points past the drawn y axis) is drawn by a Plotly redraw at once instead. Until Plotly's redraw (a frame or a
// few: the zoomed chart first) hover reads the points drawn before the window came.
"use strict";

(function (Obs) {
  const near = (a, b) => Math.abs(a - b) <= 1e-9 * Math.max(1, Math.abs(a), Math.abs(b));
  const same = (a, b) => a === b || (!!a && !!b && a.length === b.length && a.every((v, i) => v === b[i]));

  Object.assign(Obs.LineChart.prototype, {
    // A relayout of this chart: a drag-zoom, a pan, the toolbar, a double-click (autorange: the whole run).
    relayouted(ev) {
      if (this.previewRelayout) return;
      const xa = this.ctx.xaxis;
      if (ev["xaxis.autorange"]) { this.ctx.zoomTo(null); return; }
      let r = ev["xaxis.range"];
      if (!r && "xaxis.range[0]" in ev) r = [ev["xaxis.range[0]"], ev["xaxis.range[1]"]];
      if (!r) return;
      this.ctx.zoomTo([xa.toStep(r[0]), xa.toStep(r[1])], this);
    },

    // The view's range changed (this chart or another was zoomed, the URL, the step fields). A chart whose
    // history is not exact reads the window first and redraws with the finer points; meanwhile it shows the new
    // range from the points it holds (preview: `now`, the zoomed chart, right after the request has left; the
    // others one an animation frame, dashboard.js, so that the window is drawn as soon as it is in).
    setRange(now) {
      if (this.abort) { this.abort.abort(); this.abort = null; }
      this.stale = !this.visible && this.lastFull > 0;
      if (this.stale) return; // off screen: redrawn (and its window read) once scrolled into view
      this.rangeRev++; this.liveOnly = false;
      this.zoomPending = !!this.ctx.view.range;
      this.fetching = false; this.previewing = false;
      if (!this.ctx.view.range) this.items.forEach((it) => { it.zoom = null; });
      else if (this.coarse().length) {
        this.fetchZoom(); // (its request leaves once every chart of this zoom has asked: Store.window)
        if (this.plotly && this.lastFull) {
          this.previewing = true;
          if (now) queueMicrotask(() => { if (this.previewing) this.preview(); }); // (queued after the request's)
          else this.ctx.schedule();
        }
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
      this.full = true; this.dirty = true;
      let inPlace = false;
      try { inPlace = this.zoomPending && this.drawWindow(); } catch (e) { console.error("zoom drawing failed:", e); }
      if (inPlace) { // drawn: Plotly's own redraw follows (redraw() tells the page once it is done: zoomInPlotly)
        this.zoomPending = false; this.zoomCatchUp = true;
        this.ctx.zoomDrawn(this, true);
      }
      this.ctx.schedule();
    },

    // One item's finer points over the view's range (steps; a compare chart maps its x units to each run's
    // steps): the window with its step bounds {…, from, to}, or null.
    async readWindow(it, range, pts, signal) {
      const a = Math.max(0, Math.floor(range[0])), b = Math.max(0, Math.ceil(range[1]));
      const w = await this.ctx.store.window(it.name, a, b, pts, signal);
      return w && {...w, from: a, to: b};
    },

    // The new range from the traces Plotly already draws: the axes' ranges only (Plotly redraws those axes and
    // the lines, nothing else; the zoomed chart has its x range already), the y axes fitted to the drawn points.
    preview(traces) {
      this.previewing = false;
      const gd = this.plot, fl = gd._fullLayout;
      if (!this.plotly || !fl || !gd.data) return;
      const lay = this.layout(traces || gd.data), edit = {};
      for (const k of ["xaxis", "yaxis", "yaxis3"]) {
        const r = lay[k] && lay[k].range, cur = fl[k] && fl[k].range;
        if (r && cur && !(fl[k].autorange === false && near(r[0], cur[0]) && near(r[1], cur[1]))) {
          edit[k + ".range"] = r.slice(); edit[k + ".autorange"] = false;
        }
      }
      if (!Object.keys(edit).length) return;
      // (its plotly_relayout event, emitted as its promise settles, is not a zoom: relayouted ignores it)
      this.previewRelayout = true;
      const done = () => { this.previewRelayout = false; };
      try {
        Promise.resolve(Plotly.relayout(gd, edit)).then(done, (e) => { done(); console.warn("zoom preview:", e); });
      } catch (e) { done(); throw e; }
    },

    // The zoom's finer points written onto the lines Plotly draws, in its axes at the view's range: true when
    // done. Only lines change (every other trace must be what is drawn) and every visible point must fall inside
    // the drawn y axis (else the y axes are first fitted to the new points: preview); Plotly's redraw (marked
    // full) then makes it its own.
    drawWindow() {
      const gd = this.plot;
      if (!this.plotly || this.ctx.view.smooth > 0 || !gd._fullLayout) return false;
      if (this.previewing) this.preview(); // (its animation frame has not come yet)
      const traces = this.traces();
      let todo = this.linePaths(traces);
      if (todo === "y") { this.preview(traces); todo = this.linePaths(traces); }
      if (!Array.isArray(todo)) return false;
      if (this.dropTails) this.dropTails(); // (the window's lines hold every point: charts.js appendLive)
      for (const [path, d] of todo) path.setAttribute("d", d);
      return true;
    },

    // [[path, d]] for drawWindow: the new lines' SVG paths in the drawn axes; "y" when a visible point falls
    // outside the drawn y axis, false when it cannot be done.
    linePaths(traces) {
      const gd = this.plot, fl = gd._fullLayout, xa = fl.xaxis, fd = gd._fullData, drawn = gd.data;
      if (!xa || xa.type !== "linear" || !fd || !drawn) return false;
      const want = this.layout(traces).xaxis.range;
      if (!want || !near(want[0], xa.range[0]) || !near(want[1], xa.range[1])) return false;
      if (traces.length !== drawn.length) return false;
      const lo = Math.min(...xa.range), hi = Math.max(...xa.range), todo = [];
      for (let i = 0; i < traces.length; i++) {
        const tr = traces[i];
        if (same(tr.x, drawn[i].x) && same(tr.y, drawn[i].y)) continue;
        if (tr.type !== "scatter" || tr.mode !== "lines" || tr.fill || !fd[i] || !tr.x.length) return false;
        const ya = fl["yaxis" + (tr.yaxis || "y").slice(1)];
        if (!ya || (ya.type !== "linear" && ya.type !== "log")) return false;
        const [ylo, yhi] = [Math.min(...ya.range), Math.max(...ya.range)];
        const path = gd.querySelector(".trace" + fd[i].uid + " .js-line");
        if (!path) return false;
        const a = Math.max(0, Obs.lowerBound(tr.x, lo) - 1), b = Math.min(tr.x.length, Obs.lowerBound(tr.x, hi) + 1);
        let d = "";
        for (let k = a; k < b; k++) {
          const l = ya.c2l(tr.y[k]);
          if (!Number.isFinite(l)) return false;
          if (tr.x[k] >= lo && tr.x[k] <= hi && (l < ylo || l > yhi)) return "y"; // past the drawn y axis
          d += (d ? "L" : "M") + xa.c2p(tr.x[k]).toFixed(2) + "," + ya.l2p(l).toFixed(2);
        }
        todo.push([path, d]);
      }
      return todo;
    },
  });
})(window.Obs);
