"""Series math for charts that never hide a spike: min/max summaries, a block pyramid, min/max bucket downsampling.

Framework-free (no Django; numpy only for the fast path's bucketing, imported when first used). The storage layer
keeps a pyramid of summary blocks per series: level L holds one Summary per FANOUT**(L+1) consecutive steps (8, 64,
512, ... steps), so any step range is covered by a few thousand blocks at some level. A chart bucket reports its
minimum and its maximum *at their true steps*, so a one-step spike anywhere in a bucket is always drawn, at any
zoom.

Non-finite values (NaN, +Inf, -Inf: a diverged loss) are real signals: they never enter min/max (which would
poison them) but are counted per block, and the first one in each block is remembered with its step.
"""

from __future__ import annotations

import math
from typing import Callable, Iterable, Iterator, Sequence

FANOUT = 8
LEVELS = 8  # level 7 blocks span 8**8 = 16.7M steps

FINITE, NAN, POSINF, NEGINF = 0, 1, 2, 3
SPECIAL_NAMES = {NAN: "NaN", POSINF: "Infinity", NEGINF: "-Infinity"}


SHIFT = FANOUT.bit_length() - 1  # idx of a step's level-L block: step >> (SHIFT * (L + 1))
assert 1 << SHIFT == FANOUT


def block_size(level: int) -> int:
    """Steps covered by one block at `level` (level 0 = 8 steps)."""
    return FANOUT ** (level + 1)


def classify(x: float) -> tuple[float | None, int]:
    """A number -> (value, special): finite numbers keep their value; NaN/±Inf become (None, code)."""
    x = float(x)
    if math.isfinite(x):
        return x, FINITE
    if math.isnan(x):
        return None, NAN
    return None, POSINF if x > 0 else NEGINF


def unclassify(value: float | None, special: int) -> float:
    if special == FINITE:
        return value
    return {NAN: math.nan, POSINF: math.inf, NEGINF: -math.inf}[special]


class Summary:
    """What one block (or bucket) of points looks like from far away. Mergeable: merge(a, b) = summary(a ∪ b)."""

    __slots__ = ("count", "first_step", "last_step", "min", "min_step", "max", "max_step",
                 "nan", "posinf", "neginf", "ns_step", "ns_kind")

    def __init__(self, count=0, first_step=None, last_step=None, min=None, min_step=None, max=None,
                 max_step=None, nan=0, posinf=0, neginf=0, ns_step=None, ns_kind=FINITE):
        self.count = count
        self.first_step, self.last_step = first_step, last_step
        self.min, self.min_step, self.max, self.max_step = min, min_step, max, max_step
        self.nan, self.posinf, self.neginf = nan, posinf, neginf
        self.ns_step, self.ns_kind = ns_step, ns_kind  # first non-finite point in the block

    FIELDS = __slots__

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__slots__}

    def __eq__(self, other):
        return isinstance(other, Summary) and self.as_dict() == other.as_dict()

    def __repr__(self):
        return f"Summary({self.as_dict()})"

    @property
    def nonfinite(self) -> int:
        return self.nan + self.posinf + self.neginf

    def add(self, step: int, value: float | None, special: int) -> None:
        """Fold in one point. Points may come in any order."""
        self.count += 1
        if self.first_step is None or step < self.first_step:
            self.first_step = step
        if self.last_step is None or step > self.last_step:
            self.last_step = step
        if special == FINITE:
            # ties go to the earlier step so that results do not depend on arrival order
            if self.min is None or value < self.min or (value == self.min and step < self.min_step):
                self.min, self.min_step = value, step
            if self.max is None or value > self.max or (value == self.max and step < self.max_step):
                self.max, self.max_step = value, step
            return
        self.add_nonfinite(step, special)

    def add_nonfinite(self, step: int, special: int) -> None:
        """Fold in one NAN, POSINF or NEGINF point (add's other half; ingest's in-order loop calls it too)."""
        if special == NAN:
            self.nan += 1
        elif special == POSINF:
            self.posinf += 1
        else:
            self.neginf += 1
        if self.ns_step is None or step < self.ns_step:
            self.ns_step, self.ns_kind = step, special

    def merge_row(self, row: Sequence) -> "Summary":
        """merge() for a row of values in FIELDS order (a database row), without building a Summary."""
        (count, first_step, last_step, mn, mn_step, mx, mx_step, nan, posinf, neginf, ns_step, ns_kind) = row
        if not count:
            return self
        if self.count == 0:
            (self.count, self.first_step, self.last_step, self.min, self.min_step, self.max, self.max_step,
             self.nan, self.posinf, self.neginf, self.ns_step, self.ns_kind) = row
            return self
        self.count += count
        if first_step < self.first_step:
            self.first_step = first_step
        if last_step > self.last_step:
            self.last_step = last_step
        if mn is not None and (self.min is None or mn < self.min or (mn == self.min and mn_step < self.min_step)):
            self.min, self.min_step = mn, mn_step
        if mx is not None and (self.max is None or mx > self.max or (mx == self.max and mx_step < self.max_step)):
            self.max, self.max_step = mx, mx_step
        if nan or posinf or neginf:
            self.nan += nan
            self.posinf += posinf
            self.neginf += neginf
            if ns_step is not None and (self.ns_step is None or ns_step < self.ns_step):
                self.ns_step, self.ns_kind = ns_step, ns_kind
        return self

    def merge(self, o: "Summary | None") -> "Summary":
        """Fold another summary into this one (in place) and return self."""
        if o is None or o.count == 0:
            return self
        self.count += o.count
        if self.first_step is None or o.first_step < self.first_step:
            self.first_step = o.first_step
        if self.last_step is None or o.last_step > self.last_step:
            self.last_step = o.last_step
        if o.min is not None and (self.min is None or o.min < self.min
                                  or (o.min == self.min and o.min_step < self.min_step)):
            self.min, self.min_step = o.min, o.min_step
        if o.max is not None and (self.max is None or o.max > self.max
                                  or (o.max == self.max and o.max_step < self.max_step)):
            self.max, self.max_step = o.max, o.max_step
        self.nan += o.nan
        self.posinf += o.posinf
        self.neginf += o.neginf
        if o.ns_step is not None and (self.ns_step is None or o.ns_step < self.ns_step):
            self.ns_step, self.ns_kind = o.ns_step, o.ns_kind
        return self


def summarize(points: Iterable[tuple[int, float | None, int]]) -> Summary:
    s = Summary()
    for step, value, special in points:
        s.add(step, value, special)
    return s


def merged(summaries: Iterable[Summary | None]) -> Summary:
    s = Summary()
    for o in summaries:
        s.merge(o)
    return s


# ---------------------------------------------------------------------------------------------- emitting
class Window:
    """A downsampled view: parallel steps/values (values None where non-finite), plus the non-finite list."""

    __slots__ = ("steps", "values", "nonfinite", "count", "counts", "exact")

    def __init__(self):
        self.steps: list[int] = []
        self.values: list[float | None] = []
        self.nonfinite: list[tuple[int, str]] = []  # (step, "NaN" | "Infinity" | "-Infinity")
        self.count = 0  # points the window stands for
        self.counts = {"NaN": 0, "Infinity": 0, "-Infinity": 0}
        self.exact = False  # every point is present (no downsampling)


def window_from_points(points: Sequence[tuple[int, float | None, int]]) -> Window:
    """Every point, as is (sorted by step)."""
    w = Window()
    w.exact = True
    w.count = len(points)
    for step, value, special in points:
        w.steps.append(step)
        w.values.append(value)
        if special != FINITE:
            name = SPECIAL_NAMES[special]
            w.nonfinite.append((step, name))
            w.counts[name] += 1
    return w


def _emit(pts: list, mn: float, mn_step: int, mx: float, mx_step: int) -> None:
    """A bucket's min and max at their true steps, in step order (one point when they coincide)."""
    if mn_step == mx_step:
        pts.append((mn_step, mn))
    elif mn_step < mx_step:
        pts.append((mn_step, mn))
        pts.append((mx_step, mx))
    else:
        pts.append((mx_step, mx))
        pts.append((mn_step, mn))


def window_from_buckets(buckets: Sequence[Summary], exact_nonfinite: Sequence[tuple[int, int]] | None) -> Window:
    """Buckets in step order -> min and max of each at their true steps (one point when they coincide).

    exact_nonfinite: every non-finite (step, special) in the window when the caller could afford to list them;
    otherwise each bucket contributes its first non-finite point as a representative.
    """
    w = Window()
    pts: list[tuple[int, float | None]] = []
    reps: list[tuple[int, int]] = []
    for b in buckets:
        if b is None or b.count == 0:
            continue
        w.count += b.count
        w.counts["NaN"] += b.nan
        w.counts["Infinity"] += b.posinf
        w.counts["-Infinity"] += b.neginf
        if b.min is not None:
            _emit(pts, b.min, b.min_step, b.max, b.max_step)
        if exact_nonfinite is None and b.ns_step is not None:
            reps.append((b.ns_step, b.ns_kind))
    nonfinite = list(exact_nonfinite) if exact_nonfinite is not None else reps
    pts.extend((step, None) for step, _ in nonfinite)
    pts.sort(key=lambda p: p[0])
    w.steps = [p[0] for p in pts]
    w.values = [p[1] for p in pts]
    w.nonfinite = [(step, SPECIAL_NAMES[kind]) for step, kind in sorted(nonfinite)]
    return w


def window_from_extremes(min_steps: Sequence[int], mins: Sequence[float], maxs: Sequence[float],
                         max_steps: Sequence[int], count: int, per: int, edges: Sequence) -> Window:
    """What window_from_buckets gives for buckets of `per` consecutive entries of these parallel columns (blocks'
    or points' min and max at their steps, in step order, all finite, none missing), between the edges' Summaries
    (either None), with no non-finite point anywhere: the same points, found by numpy's argmin/argmax over the
    columns as rows of `per` instead of a Python loop over buckets. Ties go to the earlier step, as in Summary:
    argmin/argmax answer the first of equal values in a row, the earliest (entries are in step order)."""
    import numpy as np

    left, right = edges if edges else (None, None)
    head: list[tuple[int, float]] = []
    tail: list[tuple[int, float]] = []
    for edge, pts in ((left, head), (right, tail)):
        if edge is not None and edge.count and edge.min is not None:
            _emit(pts, edge.min, edge.min_step, edge.max, edge.max_step)
    w = Window()
    w.count = count + sum(e.count for e in (left, right) if e is not None)
    n = len(mins)
    rows = -(-n // per)
    short = rows * per - n  # the last bucket's missing entries: +inf for the min, -inf for the max never win
    lo = np.asarray(mins, dtype=np.float64)
    hi = lo if maxs is mins else np.asarray(maxs, dtype=np.float64)  # (raw points: one column, converted once)
    lo, hi = np.concatenate((lo, np.full(short, np.inf))), np.concatenate((hi, np.full(short, -np.inf)))
    first = np.arange(0, rows * per, per)
    i = first + lo.reshape(rows, per).argmin(axis=1)
    j = first + hi.reshape(rows, per).argmax(axis=1)
    si, sj = np.asarray(min_steps, dtype=np.int64)[i], np.asarray(max_steps, dtype=np.int64)[j]
    vi, vj = lo[i], hi[j]
    min_first = si <= sj
    # each bucket's two points in step order, the second left out where they are the same point
    steps, values = np.empty(2 * rows, dtype=np.int64), np.empty(2 * rows)
    steps[0::2], steps[1::2] = np.where(min_first, si, sj), np.where(min_first, sj, si)
    values[0::2], values[1::2] = np.where(min_first, vi, vj), np.where(min_first, vj, vi)
    keep = np.ones(2 * rows, dtype=bool)
    keep[1::2] = si != sj
    w.steps = [st for st, _ in head] + steps[keep].tolist() + [st for st, _ in tail]
    w.values = [v for _, v in head] + values[keep].tolist() + [v for _, v in tail]
    return w


def level0_summaries(pts: dict[int, tuple[float | None, int]]) -> Iterator[tuple[int, Summary]]:
    """(idx, Summary) of the level-0 blocks of one series' points {step: (value, special)}: Summary.add inlined
    over steps in order (the hottest loop of ingest). In step order, the first minimum/maximum met is the earliest,
    as Summary wants."""
    idx = -1
    s = None
    for step in sorted(pts):  # already in order as a rule: timsort makes that one pass
        v, sp = pts[step]
        if step >> SHIFT != idx:
            if s is not None:
                yield idx, s
            idx = step >> SHIFT
            s = Summary(0, step)
        s.count += 1
        s.last_step = step
        if sp == FINITE:
            if s.min is None or v < s.min:
                s.min, s.min_step = v, step
            if s.max is None or v > s.max:
                s.max, s.max_step = v, step
        else:
            s.add_nonfinite(step, sp)
    if s is not None:
        yield idx, s


def bucket_points(points: Iterable[tuple[int, float | None, int]], lo: int, hi: int, n_buckets: int
                  ) -> list[Summary]:
    """Split [lo, hi] into n_buckets equal step spans and summarise the points of each (in step order)."""
    width = max(1, -(-(hi - lo + 1) // max(1, n_buckets)))
    out: dict[int, Summary] = {}
    for step, value, special in points:
        key = (step - lo) // width
        s = out.get(key)
        if s is None:
            s = out[key] = Summary()
        s.add(step, value, special)
    return [out[k] for k in sorted(out)]


def downsample(steps: Sequence[int], values: Sequence[float], max_points: int) -> Window:
    """Raw arrays -> at most max_points points, keeping each bucket's min and max (and non-finite points).

    The in-memory reference of what the database query returns; also used for small windows.
    """
    if len(steps) != len(values):
        raise ValueError("steps and values differ in length")
    if max_points < 4:
        raise ValueError("max_points must be >= 4")
    pts = sorted((int(s), *classify(v)) for s, v in zip(steps, values))
    if len(pts) <= max_points:
        return window_from_points(pts)
    nonfinite = [(s, k) for s, _, k in pts if k != FINITE]
    if len(nonfinite) <= max_points // 4:
        n_buckets = (max_points - len(nonfinite)) // 2
        exact = nonfinite
    else:
        n_buckets = max_points // 3
        exact = None
    return window_from_buckets(bucket_points(pts, pts[0][0], pts[-1][0], n_buckets), exact)


# ---------------------------------------------------------------------------------------------- pyramid
def parent_index(idx: int) -> int:
    return idx // FANOUT


class PyramidBuilder:
    """Streams points in increasing step order and emits every finished block at every level.

    emit(level, idx, summary) is called once per block. Memory is O(LEVELS): used to bulk-load long series.
    """

    def __init__(self, emit: Callable[[int, int, Summary], None]):
        self.emit = emit
        self.open: list[tuple[int, Summary] | None] = [None] * LEVELS
        self.last_step: int | None = None

    def add(self, step: int, value: float | None, special: int) -> None:
        if self.last_step is not None and step <= self.last_step:
            raise ValueError(f"steps must increase: {step} after {self.last_step}")
        self.last_step = step
        idx = step // FANOUT
        cur = self.open[0]
        if cur is None or cur[0] != idx:
            if cur is not None:
                self._close(0)
            cur = self.open[0] = (idx, Summary())
        cur[1].add(step, value, special)

    def _close(self, level: int) -> None:
        idx, summary = self.open[level]
        self.open[level] = None
        self.emit(level, idx, summary)
        if level + 1 >= LEVELS:
            return
        pidx = parent_index(idx)
        parent = self.open[level + 1]
        if parent is not None and parent[0] != pidx:
            self._close(level + 1)
            parent = None
        if parent is None:
            parent = self.open[level + 1] = (pidx, Summary())
        parent[1].merge(summary)

    def finish(self) -> None:
        for level in range(LEVELS):
            if self.open[level] is not None:
                self._close(level)


def build_pyramid(points: Iterable[tuple[int, float | None, int]]) -> Iterator[tuple[int, int, Summary]]:
    """All blocks of a series given its points in increasing step order (for tests and small loads)."""
    out: list[tuple[int, int, Summary]] = []
    b = PyramidBuilder(lambda lvl, idx, s: out.append((lvl, idx, s)))
    for p in points:
        b.add(*p)
    b.finish()
    return iter(out)
