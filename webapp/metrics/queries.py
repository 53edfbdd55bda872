"""Reading series: a step window downsampled to at most P points with every spike kept, and raw tails. The plan
of window(), each read bounded by an index range: docs/ARCHITECTURE.md "Storage"."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generator

from django.db import connection

from observatory.downsample import (
    FINITE, LEVELS, Summary, Window, block_size, bucket_points, summarize, window_from_buckets, window_from_extremes,
    window_from_points,
)
from webapp.metrics.models import Block, Point, Series

DEFAULT_POINTS = 1000
MIN_POINTS = 10
MAX_POINTS = 20_000
FETCH_FACTOR = 4  # read at most FETCH_FACTOR * P rows to build a P-point view
RAW = -1  # "level" of a window built from raw points
FAST_PATH = True  # dense, all-finite windows by C-level min/max over column slices (tests turn it off to compare)


@dataclass
class SeriesWindow:
    start: int | None
    end: int | None
    level: int
    bucket_steps: int
    window: Window

    def as_json(self) -> dict:
        w = self.window
        return {
            "start": self.start, "end": self.end, "level": self.level, "bucket_steps": self.bucket_steps,
            "exact": w.exact, "count": w.count, "steps": w.steps, "values": w.values,
            "nonfinite": [list(p) for p in w.nonfinite], "nonfinite_counts": w.counts,
        }


def _count_upto(name: str, params: list, limit: int):
    """(a plan: `yield from` it) COUNT over a LIMITed subquery: cost bounded by limit, not by the series."""
    return (yield from _rows(name, [*params, limit + 1]))[0][0]


def _blocks_upto(sid: int, level: int, first: int, last: int, limit: int, dense: bool):
    """What _count_upto("count_blocks", ...) answers; a dense series has every block of its span: no query."""
    if dense:
        return min(max(0, last - first + 1), limit + 1)
    return (yield from _count_upto("count_blocks", [sid, level, first, last], limit))


_SQL: dict[str, str] = {}


def _sql(name: str) -> str:
    """Hot-path statements, built once (raw SQL: ORM row construction costs more than the reads here)."""
    if not _SQL:
        qn = connection.ops.quote_name
        cols = ", ".join(qn(c) for c in Block.SUMMARY_FIELDS)
        step, idx = qn("step"), qn("idx")
        # a series' blocks of one level in an idx range; its raw points in a step range
        blocks = (f"FROM {qn(Block._meta.db_table)} WHERE {qn('series_id')} = %s AND {qn('level')} = %s "
                  f"AND {idx} BETWEEN %s AND %s")
        points = f"FROM {qn(Point._meta.db_table)} WHERE {qn('series_id')} = %s AND {step} BETWEEN %s AND %s"
        extremes = ", ".join(qn(c) for c in ("count", "min", "min_step", "max", "max_step"))
        _SQL.update({
            "blocks": f"SELECT {idx}, {cols} {blocks} ORDER BY {idx}",
            "block_extremes": f"SELECT {extremes} {blocks} ORDER BY {idx}",  # the fast path: only what it uses
            "sum_blocks": f"SELECT SUM({qn('count')}) {blocks}",
            "count_blocks": f"SELECT COUNT(*) FROM (SELECT 1 {blocks} LIMIT %s) AS t",
            "points": f"SELECT {step}, {qn('value')}, {qn('special')} {points} ORDER BY {step}",
            "values": f"SELECT {qn('value')} {points} ORDER BY {step}",
            "count_points": f"SELECT COUNT(*) FROM (SELECT 1 {points} LIMIT %s) AS t",
            # edge regions: several block / step ranges in one statement, their SELECTs chained by UNION ALL (an OR of
            # ranges let SQLite's planner scan the series' whole index)
            "edge_blocks": f"SELECT {qn('level')}, {idx}, {cols} {blocks}",
            "edge_points": f"SELECT {step}, {qn('value')}, {qn('special')} {points}",
            "nonfinite": f"SELECT {step}, {qn('special')} {points} AND {qn('special')} > {FINITE} "
                         f"ORDER BY {step} LIMIT %s",
        })
    return _SQL[name]


# A window's plan is a generator (Plan): it yields the statements it needs next, [(sql, params), ...], and is sent
# their rows, [rows, ...]; it returns its SeriesWindow. window() runs one plan; windows() runs several in lockstep,
# each round's statements together (PostgreSQL: one pipeline, one round trip for every series of a zoom).
Plan = Generator[list[tuple[str, list]], list[list[tuple]], "SeriesWindow"]


def _rows(name: str, params: list):
    """(in a plan) `yield from` it: the rows of one hot-path statement."""
    return (yield [(_sql(name), params)])[0]


def _run(stmts: list[tuple[str, list]]) -> list[list[tuple]]:
    """Each statement's rows. On PostgreSQL several go in one pipeline: sent together, one round trip."""
    if len(stmts) > 1 and connection.vendor == "postgresql":
        connection.ensure_connection()
        raw = connection.connection
        with raw.pipeline() as pipe:
            curs = [raw.cursor() for _ in stmts]
            for cur, (sql, params) in zip(curs, stmts):
                cur.execute(sql, params)
            pipe.sync()
            return [cur.fetchall() for cur in curs]
    out = []
    with connection.cursor() as cur:
        for sql, params in stmts:
            cur.execute(sql, params)
            out.append(cur.fetchall())
    return out


def run_plans(plans: list[Plan]) -> list[SeriesWindow]:
    """Run plans to their end in lockstep: every plan's next statements in one round."""
    out: list = [None] * len(plans)
    want: dict[int, list] = {}

    def advance(i: int, sent) -> None:
        try:
            want[i] = plans[i].send(sent)
        except StopIteration as stop:
            out[i] = stop.value
    for i in range(len(plans)):
        advance(i, None)
    while want:
        asked = sorted(want.items())
        want.clear()
        rows = _run([stmt for _, stmts in asked for stmt in stmts])
        for i, stmts in asked:
            advance(i, rows[:len(stmts)])
            rows = rows[len(stmts):]
    return out


def window(series: Series, start: int, end: int, points: int = DEFAULT_POINTS) -> SeriesWindow:
    return run_plans([_window(series, start, end, points)])[0]


def windows(series: list[Series], start: int, end: int, points: int = DEFAULT_POINTS) -> list[SeriesWindow]:
    """window() of several series, their reads made together (as many round trips as one series' plan)."""
    return run_plans([_window(s, start, end, points) for s in series])


def _at_least(sid: int, lo: int, hi: int, most: int = 16):
    """A lower bound on the points in [lo, hi]: the counts of the (at most `most`) whole blocks of the finest level
    with that few inside it (0 when there is none)."""
    for level in range(LEVELS):
        first, last = _whole_blocks(lo, hi, level)
        if last - first + 1 <= most:
            return ((yield from _rows("sum_blocks", [sid, level, first, last]))[0][0] or 0) if first <= last else 0
    return 0


def _whole_blocks(lo: int, hi: int, level: int) -> tuple[int, int]:
    size = block_size(level)
    return -(-lo // size), (hi + 1) // size - 1


def _blocks_pay(sid: int, lo: int, hi: int, n_raw: int, n_mid: int, limit: int, dense: bool):
    """(a plan: `yield from` it) Whether a window few enough points to bucket raw is better read from its whole
    level-0 blocks: they give half its buckets or more (what the block path settles for at every level: whole blocks,
    `per` of them to a bucket), in a quarter of the rows or fewer (a dense series: an eighth). The buckets are then
    8 steps wide, each still its min and max at their true steps."""
    first, last = _whole_blocks(lo, hi, 0)
    span = last - first + 1
    if 2 * span < n_mid or 4 * min(span, n_raw) > n_raw:  # (a sparse series' blocks: at most one a point)
        return False
    blocks = yield from _blocks_upto(sid, 0, first, last, limit, dense)
    return 2 * blocks >= n_mid and 4 * blocks <= n_raw


def _window(series: Series, start: int, end: int, points: int) -> Plan:
    sid = series.id
    if series.first_step is None:
        return SeriesWindow(None, None, RAW, 1, window_from_points([]))
    lo, hi = max(start, series.first_step), min(end, series.last_step)
    if lo > hi:
        return SeriesWindow(lo, hi, RAW, 1, window_from_points([]))
    limit = FETCH_FACTOR * points
    # Every step of its span present (the writers' totals say so: points are unique by step): the counts below are
    # known without reading the index (a point or block missing meanwhile, a rollback's, still takes the general path)
    dense = FAST_PATH and series.count == series.last_step - series.first_step + 1
    if hi - lo + 1 <= points:
        n_raw = hi - lo + 1
    elif dense:
        n_raw = min(hi - lo + 1, limit + 1)
    elif (yield from _at_least(sid, lo, hi)) > limit:
        n_raw = limit + 1  # what the LIMITed count would say, from a few blocks instead of up to 4P index entries
    else:
        n_raw = yield from _count_upto("count_points", [sid, lo, hi], limit)
    if n_raw <= points:
        return SeriesWindow(lo, hi, RAW, 1, window_from_points((yield from _rows("points", [sid, lo, hi]))))

    nonfinite = yield from _rows("nonfinite", [sid, lo, hi, points // 4 + 1])
    exact_nf = nonfinite if len(nonfinite) <= points // 4 else None
    n_buckets = (points - len(nonfinite)) // 2 if exact_nf is not None else points // 3

    n_mid = max(1, n_buckets - 2)  # the block path's buckets between its two edge regions (a bucket each)
    if n_raw <= limit and not (yield from _blocks_pay(sid, lo, hi, n_raw, n_mid, limit, dense)):
        width = -(-(hi - lo + 1) // n_buckets)
        if FAST_PATH and not nonfinite and n_raw == hi - lo + 1:  # every step present, all finite: fast path
            values = [v for (v,) in (yield from _rows("values", [sid, lo, hi]))]
            if len(values) == n_raw and None not in values:  # (no write landed in between)
                return SeriesWindow(lo, hi, RAW, width,
                                    window_from_extremes(range(lo, hi + 1), values, values, range(lo, hi + 1),
                                                     n_raw, width, []))
        buckets = bucket_points((yield from _rows("points", [sid, lo, hi])), lo, hi, n_buckets)
        return SeriesWindow(lo, hi, RAW, width, window_from_buckets(buckets, exact_nf))

    # Coarsest level whose block span alone guarantees <= limit blocks, then finer while the real count allows
    # (sparse series): a dense series costs one LIMITed count here.
    level = next((lv for lv in range(LEVELS) if _whole_blocks(lo, hi, lv)[1] - _whole_blocks(lo, hi, lv)[0] + 1
                  <= limit), LEVELS - 1)
    density = series.count / (series.last_step - series.first_step + 1)
    while level > 0:
        first, last = _whole_blocks(lo, hi, level - 1)
        if (last - first + 1) * density > 2 * limit:
            break  # clearly too many blocks for a (near-)dense series: skip counting them
        if (yield from _blocks_upto(sid, level - 1, first, last, limit, dense)) > limit:
            break
        level -= 1
    if level + 1 < LEVELS:
        # A coarser level that still yields ~90% of the buckets asked for costs 8x fewer rows: prefer it.
        first, last = _whole_blocks(lo, hi, level + 1)
        if last - first + 1 >= 0.9 * n_mid:
            if (yield from _blocks_upto(sid, level + 1, first, last, n_mid, dense)) >= 0.9 * n_mid:
                level += 1
    size = block_size(level)
    first, last = _whole_blocks(lo, hi, level)
    if first > last:  # no whole block (tiny P): the window is one edge region
        return SeriesWindow(lo, hi, level, hi - lo + 1,
                            window_from_buckets([(yield from region_summary(sid, lo, hi, level))], exact_nf))
    per = max(1, -(-(last - first + 1) // n_mid))  # consecutive blocks merged into one bucket
    left, right = yield from region_summaries(sid, [(lo, first * size - 1, level - 1),
                                                    ((last + 1) * size, hi, level - 1)])
    if FAST_PATH and not nonfinite and not any(e is not None and e.nonfinite for e in (left, right)):
        rows = yield from _rows("block_extremes", [sid, level, first, last])
        if len(rows) == last - first + 1:  # every block present (unique idx): runs of `per` rows are buckets
            counts, mins, min_steps, maxs, max_steps = zip(*rows)
            if None not in mins and None not in maxs:  # all finite (no block of non-finite points only)
                return SeriesWindow(lo, hi, level, per * size,
                                    window_from_extremes(min_steps, mins, maxs, max_steps, sum(counts), per,
                                                     [left, right]))
    buckets: list[Summary | None] = [left]
    cur_key = None
    for idx, *row in (yield from _rows("blocks", [sid, level, first, last])):
        key = (idx - first) // per
        if key != cur_key:
            buckets.append(Summary())
            cur_key = key
        buckets[-1].merge_row(row)
    buckets.append(right)
    return SeriesWindow(lo, hi, level, per * size, window_from_buckets(buckets, exact_nf))


def _cover(lo: int, hi: int, level: int, blocks: list, points: list) -> None:
    """The reads that summarise [lo, hi] exactly from blocks of `level` and finer: (level, first idx, last idx)
    block ranges onto `blocks`, raw (lo, hi) step ranges onto `points` (an edge region: a few of each)."""
    while lo <= hi:
        if level < 0:
            points.append((lo, hi))
            return
        first, last = _whole_blocks(lo, hi, level)
        if first <= last:
            size = block_size(level)
            blocks.append((level, first, last))
            _cover(lo, first * size - 1, level - 1, blocks, points)
            lo, level = (last + 1) * size, level - 1
        else:
            level -= 1


def region_summaries(sid: int, regions: list[tuple[int, int, int]]):
    """(a plan: `yield from` it) Exact summaries of the points in disjoint step ranges [(lo, hi, level)], each read
    from blocks of its level and finer (raw points at -1): all their blocks in one statement, all their raw points in
    another, both in one round (None for a range with lo > hi)."""
    blocks: list[tuple[int, int, int]] = []
    points: list[tuple[int, int]] = []
    for lo, hi, level in regions:
        _cover(lo, hi, level, blocks, points)
    out = [Summary() if lo <= hi else None for lo, hi, _ in regions]

    def owner(step: int) -> Summary:
        return next(out[i] for i, (lo, hi, _) in enumerate(regions) if lo <= step <= hi)
    stmts = []
    if blocks:
        stmts.append((" UNION ALL ".join([_sql("edge_blocks")] * len(blocks)), [x for b in blocks for x in (sid, *b)]))
    if points:
        stmts.append((" UNION ALL ".join([_sql("edge_points")] * len(points)), [x for p in points for x in (sid, *p)]))
    got = (yield stmts) if stmts else []
    if blocks:
        for level, idx, *row in got.pop(0):
            owner(idx * block_size(level)).merge_row(row)
    if points:
        for step, value, special in got.pop(0):
            owner(step).add(step, value, special)
    return out


def region_summary(sid: int, lo: int, hi: int, level: int):
    """(a plan: `yield from` it) Exact summary of the points in [lo, hi], from blocks of `level` and finer."""
    return (yield from region_summaries(sid, [(lo, hi, level)]))[0]


def tail(series_id: int, after_step: int, limit: int) -> tuple[list[tuple[int, float | None, int]], bool]:
    """Raw points with step > after_step, oldest first, at most `limit`; and whether more were left out."""
    rows = list(Point.objects.filter(series_id=series_id, step__gt=after_step).order_by("step")
                .values_list("step", "value", "special")[: limit + 1])
    return rows[:limit], len(rows) > limit
