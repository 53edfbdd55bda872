// The charts' data model: pure functions over plain arrays, no DOM (tests/js/chartmodel.test.js runs them in
// Node). What a chart draws of a series is its held history with a zoomed window's finer points merged in
// (mergeWindow), each line at most ~2 points a pixel bucket, spikes kept (minmax, M4's min/max per bucket), live
// points appended to a growing typed-array buffer without an allocation a point (LiveBuffer), cut back by a rewind
// (cutAfter), and close labels folded into one at the chart's zoom (labelGroups).
"use strict";

(function (Obs) {
  // The first index whose value is >= x (arr sorted: a binary search). Every page's (series.js, view.js, ...).
  const lowerBound = Obs.lowerBound = (arr, x) => {
    let lo = 0, hi = arr.length;
    while (lo < hi) { const mid = (lo + hi) >> 1; if (arr[mid] < x) lo = mid + 1; else hi = mid; }
    return lo;
  };

  // a's points outside [from, to], b's inside (a, b: {steps, values, nfSteps, nfKinds}, steps sorted)
  Obs.mergeWindow = (a, b, from, to) => {
    const i = lowerBound(a.steps, from), j = lowerBound(a.steps, to + 1);
    const k = lowerBound(a.nfSteps, from), l = lowerBound(a.nfSteps, to + 1);
    return {steps: a.steps.slice(0, i).concat(b.steps, a.steps.slice(j)),
            values: a.values.slice(0, i).concat(b.values, a.values.slice(j)),
            nfSteps: a.nfSteps.slice(0, k).concat(b.nfSteps, a.nfSteps.slice(l)),
            nfKinds: a.nfKinds.slice(0, k).concat(b.nfKinds, a.nfKinds.slice(l))};
  };

  // A rewind to `step`: the points after it go (the run redoes them); arrays cut in place.
  Obs.cutAfter = (d, step) => {
    const i = lowerBound(d.steps, step + 1), j = lowerBound(d.nfSteps || [], step + 1);
    d.steps.length = i; d.values.length = i;
    if (d.nfSteps) { d.nfSteps.length = j; d.nfKinds.length = j; }
    return d;
  };

  // Live points of one line: x and y in Float64Arrays that double when full (amortised: no allocation a point);
  // load() starts it from a drawn line (charts' live append path, chartlive.js).
  // view() hands the filled part as subarrays (views of the same memory) to the renderer.
  class LiveBuffer {
    constructor(capacity = 1024) {
      this.x = new Float64Array(capacity); this.y = new Float64Array(capacity); this.n = 0;
    }
    push(x, y) {
      if (this.n === this.x.length) {
        const X = new Float64Array(this.n * 2), Y = new Float64Array(this.n * 2);
        X.set(this.x); Y.set(this.y); this.x = X; this.y = Y;
      }
      this.x[this.n] = x; this.y[this.n] = y; this.n++;
    }
    load(x, y) { // the buffer holds x, y (arrays): a copy, the memory reused unless it must grow
      if (x.length > this.x.length) {
        let c = this.x.length;
        while (c < x.length) c *= 2;
        this.x = new Float64Array(c); this.y = new Float64Array(c);
      }
      this.x.set(x); this.y.set(y); this.n = x.length;
    }
    cutAfter(x) { this.n = lowerBound(this.x.subarray(0, this.n), x + 1e-9 * Math.max(1, Math.abs(x))); }
    view() { return [this.x.subarray(0, this.n), this.y.subarray(0, this.n)]; }
  }
  Obs.LiveBuffer = LiveBuffer;

  // A line of sorted x at most ~2 points a bucket: each of `buckets` equal x spans keeps its min and its max, in x
  // order (a one-point spike survives), as the server's pyramid downsamples. Returns [x, y].
  Obs.minmax = (x, y, buckets) => {
    const n = x.length, X = [], Y = [];
    if (n < 3) return [x.slice(), y.slice()];
    const x0 = x[0], w = (x[n - 1] - x0) / buckets || 1;
    for (let i = 0; i < n;) {
      const b = Math.floor((x[i] - x0) / w);
      let lo = i, hi = i, j = i;
      for (; j < n && Math.floor((x[j] - x0) / w) === b; j++) {
        if (y[j] < y[lo]) lo = j;
        if (y[j] > y[hi]) hi = j;
      }
      for (const k of lo === hi ? [lo] : [Math.min(lo, hi), Math.max(lo, hi)]) { X.push(x[k]); Y.push(y[k]); }
      i = j;
    }
    return [X, Y];
  };

  // The x span of a figure's lines (traces, x sorted): [lo, hi], or [Infinity, -Infinity] when none has a point.
  Obs.xExtent = (traces) => {
    let lo = Infinity, hi = -Infinity;
    for (const tr of traces || []) {
      if (tr.mode !== "lines" || !tr.x || !tr.x.length) continue;
      lo = Math.min(lo, tr.x[0]); hi = Math.max(hi, tr.x[tr.x.length - 1]);
    }
    return [lo, hi];
  };

  // Debiased exponential moving average (TensorBoard's): the early points are not dragged towards zero.
  Obs.ema = (values, w) => {
    let last = 0;
    return values.map((v, i) => { last = last * w + (1 - w) * v; return last / (1 - Math.pow(w, i + 1)); });
  };

  // Labelled marks whose labels would overprint at the chart's current scale, in groups: sorted by pixel x, a mark
  // joins the group before it when it starts before that group's label ends (its first label's estimated width
  // at `charPx` a character, or the group's "+N" label's). px(step): the mark's x in pixels at the current zoom.
  // A mark with anchor "center" has its label centred on it.
  let scratch = {lefts: new Float64Array(64), order: new Int32Array(64)}; // (labelGroups')
  Obs.labelGroups = (marks, px, charPx) => {
    const width = (chars) => chars * charPx + 8; // a label's width in pixels, from its length
    const left = (o, chars) => { // its left edge
      const at = px(o.x0);
      return o.anchor === "center" ? at - width(chars) / 2 : at;
    };
    // (each mark's left edge and the marks' indices sorted by it in typed arrays kept for the next call, not an
    // object a mark: the marks of a live chart are grouped again at almost every step of a detector storm)
    const n = marks.length;
    if (scratch.lefts.length < n) scratch = {lefts: new Float64Array(2 * n), order: new Int32Array(2 * n)};
    const lefts = scratch.lefts;
    let order = scratch.order, m = 0, sorted = true;
    for (let i = 0; i < n; i++) {
      lefts[i] = left(marks[i], String(marks[i].label).length);
      if (!Number.isFinite(lefts[i])) continue;
      if (m && lefts[i] < lefts[order[m - 1]]) sorted = false;
      order[m++] = i;
    }
    // (the order a whole number: a difference of lefts is a double, a heap object a comparison made by the sort)
    if (!sorted) order = order.subarray(0, m).sort((a, b) => (lefts[a] > lefts[b]) - (lefts[a] < lefts[b]) || a - b);
    const groups = [];
    let cur = null, end = 0, chars = 0; // the group being made: its marks, its label's right edge, first's length
    for (let k = 0; k < m; k++) { // (an index, not an iterator: no object a mark in baseline code)
      const i = order[k], o = marks[i];
      if (cur && lefts[i] < end) {
        cur.push(o);
        const drawn = groupLabelLength(cur, chars); // (the label drawn: its length, not the text)
        end = Math.max(end, left(cur[0], drawn) + width(drawn));
      } else {
        chars = String(o.label).length;
        cur = [o];
        end = lefts[i] + width(chars);
        groups.push(cur);
      }
    }
    return groups;
  };
  // One label for a group: the first mark's, shortened to GROUP_FIRST_CHARS, and how many more; its hover text lists
  // every mark in full. groupLabelLength: its length, from the first label's (`first` characters), without making it.
  const GROUP_FIRST_CHARS = 14;
  const groupLabelLength = (marks, first) => marks.length === 1 ? first
    : Math.min(first, GROUP_FIRST_CHARS) + 2 + String(marks.length - 1).length; // (" +N": V8 caches N's text)
  Obs.groupLabel = (marks) => {
    if (marks.length === 1) return String(marks[0].label);
    const first = String(marks[0].label);
    return (first.length > GROUP_FIRST_CHARS ? first.slice(0, GROUP_FIRST_CHARS - 1) + "…" : first) +
      ` +${marks.length - 1}`;
  };
  // (lines joined by <br>: plot.js shows each on a line of its own, as text)
  Obs.groupHover = (marks) => marks.flatMap((o) => [].concat(o.hover || o.label)).map(String).join("<br>");

})(typeof window !== "undefined" ? (window.Obs = window.Obs || {}) : module.exports);
