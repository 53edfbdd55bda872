"""Reading series: a step window downsampled to at most P points with every spike kept, and raw tails. The plan
of window(), each read bounded by an index range: docs/ARCHITECTURE.md "Storage"."""

from __future__ import annotations

from dataclasses import dataclass

from django.db import connection

from observatory.downsample import (
    FINITE, LEVELS, NAN, NEGINF, POSINF, Summary, Window, block_size, summarize, window_from_buckets,
    window_from_points,
)
from webapp.metrics.models import Block, Point, Series

DEFAULT_POINTS = 1000
MIN_POINTS = 10
MAX_POINTS = 20_000
FETCH_FACTOR = 4  # read at most FETCH_FACTOR * P rows to build a P-point view
RAW = -1  # "level" of a window built from raw points


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


def _count_upto(name: str, params: list, limit: int) -> int:
    """COUNT over a LIMITed subquery: cost bounded by limit, not by the series."""
    return _rows(name, [*params, limit + 1])[0][0]


_SQL: dict[str, str] = {}


def _sum(expr: str) -> str:
    return f"CAST(SUM({expr}) AS BIGINT)"  # PostgreSQL's SUM of integers is numeric (Decimal in Python)


def _sql(name: str) -> str:
    """Hot-path statements, built once (raw SQL: ORM row construction costs more than the reads here)."""
    if not _SQL:
        qn = connection.ops.quote_name
        cols = ", ".join(qn(c) for c in Block.SUMMARY_FIELDS)
        block, point = qn(Block._meta.db_table), qn(Point._meta.db_table)
        sid, step, idx = qn("series_id"), qn("step"), qn("idx")
        _SQL["blocks"] = (f"SELECT {idx}, {cols} FROM {block} WHERE {sid} = %s AND "
                          f"{qn('level')} = %s AND {idx} BETWEEN %s AND %s ORDER BY {idx}")
        _SQL["points"] = (f"SELECT {step}, {qn('value')}, {qn('special')} FROM {point} WHERE "
                          f"{sid} = %s AND {step} BETWEEN %s AND %s ORDER BY {step}")
        _SQL["count_points"] = (f"SELECT COUNT(*) FROM (SELECT 1 FROM {point} WHERE {sid} = %s AND "
                                f"{step} BETWEEN %s AND %s LIMIT %s) AS t")
        _SQL["count_blocks"] = (f"SELECT COUNT(*) FROM (SELECT 1 FROM {block} WHERE {sid} = %s AND "
                                f"{qn('level')} = %s AND {idx} BETWEEN %s AND %s LIMIT %s) AS t")
        _SQL["nonfinite"] = (f"SELECT {step}, {qn('special')} FROM {point} WHERE {sid} = %s AND {step} BETWEEN "
                             f"%s AND %s AND {qn('special')} > {FINITE} ORDER BY {step} LIMIT %s")
        # Buckets summarised in the database: a few hundred rows come back instead of thousands (building Python
        # objects for every row read was most of a window's time). Each is the Summary that merging its rows in
        # Python gave: sums and extremes in one GROUP BY, then each extreme's step (the earliest holding it: the
        # tie rule of Summary.merge/add) and the first non-finite point's kind looked up in the bucket's own key
        # range ([k0, k1], one short primary-key range each). A join of the rows to their buckets' extremes
        # instead was quadratic on SQLite (no index on the grouped rows), window functions 2x slower.
        c = {f: qn(f) for f in Block.SUMMARY_FIELDS}
        g = "(%s - CAST(%%s AS BIGINT)) / CAST(%%s AS BIGINT)"
        lvl = qn("level")
        block_where = f"{sid} = %s AND {lvl} = %s AND {idx} BETWEEN %s AND %s"
        block_agg = (f"SELECT {g % idx} AS g, MIN({idx}) AS k0, MAX({idx}) AS k1, {_sum(c['count'])} AS cnt, "
                     f"MIN({c['first_step']}) AS fs, MAX({c['last_step']}) AS ls, MIN({c['min']}) AS mn, "
                     f"MAX({c['max']}) AS mx, {_sum(c['nan'])} AS nan, {_sum(c['posinf'])} AS posinf, "
                     f"{_sum(c['neginf'])} AS neginf, MIN({c['ns_step']}) AS ns FROM {block} WHERE {block_where} "
                     f"GROUP BY g")
        block_in = f"FROM {block} b WHERE b.{sid} = %s AND b.{lvl} = %s AND b.{idx} BETWEEN a.k0 AND a.k1"
        point_where = f"{sid} = %s AND {step} BETWEEN %s AND %s"
        sp = qn("special")
        point_agg = (f"SELECT {g % step} AS g, MIN({step}) AS k0, MAX({step}) AS k1, COUNT(*) AS cnt, "
                     f"MIN({step}) AS fs, MAX({step}) AS ls, MIN({qn('value')}) AS mn, MAX({qn('value')}) AS mx, "
                     f"{_sum(f'CASE WHEN {sp} = {NAN} THEN 1 ELSE 0 END')} AS nan, "
                     f"{_sum(f'CASE WHEN {sp} = {POSINF} THEN 1 ELSE 0 END')} AS posinf, "
                     f"{_sum(f'CASE WHEN {sp} = {NEGINF} THEN 1 ELSE 0 END')} AS neginf, "
                     f"MIN(CASE WHEN {sp} > {FINITE} THEN {step} END) AS ns FROM {point} WHERE {point_where} "
                     f"GROUP BY g")
        point_in = f"FROM {point} b WHERE b.{sid} = %s AND b.{step} BETWEEN a.k0 AND a.k1"
        for key, agg, where_in, mn, mn_step, mx, mx_step, ns, ns_kind in (
                ("bucket_blocks", block_agg, block_in, c["min"], c["min_step"], c["max"], c["max_step"],
                 c["ns_step"], c["ns_kind"]),
                ("bucket_points", point_agg, point_in, qn("value"), step, qn("value"), step, step, sp)):
            _SQL[key] = (
                f"SELECT a.cnt, a.fs, a.ls, a.mn, (SELECT MIN(b.{mn_step}) {where_in} AND b.{mn} = a.mn), a.mx, "
                f"(SELECT MIN(b.{mx_step}) {where_in} AND b.{mx} = a.mx), a.nan, a.posinf, a.neginf, a.ns, "
                f"CASE WHEN a.ns IS NULL THEN {FINITE} ELSE (SELECT MIN(b.{ns_kind}) {where_in} AND b.{ns} = a.ns) "
                f"END FROM ({agg}) a ORDER BY a.g")
    return _SQL[name]


def _rows(name: str, params: list) -> list[tuple]:
    with connection.cursor() as cur:
        cur.execute(_sql(name), params)
        return cur.fetchall()


def _whole_blocks(lo: int, hi: int, level: int) -> tuple[int, int]:
    size = block_size(level)
    return -(-lo // size), (hi + 1) // size - 1


def window(series: Series, start: int, end: int, points: int = DEFAULT_POINTS) -> SeriesWindow:
    sid = series.id
    if series.first_step is None:
        return SeriesWindow(None, None, RAW, 1, window_from_points([]))
    lo, hi = max(start, series.first_step), min(end, series.last_step)
    if lo > hi:
        return SeriesWindow(lo, hi, RAW, 1, window_from_points([]))
    limit = FETCH_FACTOR * points
    n_raw = hi - lo + 1 if hi - lo + 1 <= points else _count_upto("count_points", [sid, lo, hi], limit)
    if n_raw <= points:
        return SeriesWindow(lo, hi, RAW, 1, window_from_points(_rows("points", [sid, lo, hi])))

    nonfinite = _rows("nonfinite", [sid, lo, hi, points // 4 + 1])
    exact_nf = nonfinite if len(nonfinite) <= points // 4 else None
    n_buckets = (points - len(nonfinite)) // 2 if exact_nf is not None else points // 3

    if n_raw <= limit:  # buckets of raw points, summarised by the database (as bucket_points would)
        width = max(1, -(-(hi - lo + 1) // max(1, n_buckets)))
        buckets = [Summary(*row) for row in _rows("bucket_points", [sid] * 3 + [lo, width, sid, lo, hi])]
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
        if _count_upto("count_blocks", [sid, level - 1, first, last], limit) > limit:
            break
        level -= 1
    n_mid = max(1, n_buckets - 2)  # the two edge regions get a bucket each
    if level + 1 < LEVELS:
        # A coarser level that still yields ~90% of the buckets asked for costs 8x fewer rows: prefer it.
        first, last = _whole_blocks(lo, hi, level + 1)
        if last - first + 1 >= 0.9 * n_mid:
            if _count_upto("count_blocks", [sid, level + 1, first, last], n_mid) >= 0.9 * n_mid:
                level += 1
    size = block_size(level)
    first, last = _whole_blocks(lo, hi, level)
    if first > last:  # no whole block (tiny P): the window is one edge region
        return SeriesWindow(lo, hi, level, hi - lo + 1,
                            window_from_buckets([region_summary(sid, lo, hi, level)], exact_nf))
    per = max(1, -(-(last - first + 1) // n_mid))  # consecutive blocks merged into one bucket
    # runs of `per` consecutive blocks merged into one bucket each, by the database
    buckets: list[Summary | None] = [region_summary(sid, lo, first * size - 1, level - 1)]
    buckets.extend(Summary(*row) for row in _rows("bucket_blocks", [sid, level] * 3 + [first, per, sid, level,
                                                                                      first, last]))
    buckets.append(region_summary(sid, (last + 1) * size, hi, level - 1))
    return SeriesWindow(lo, hi, level, per * size, window_from_buckets(buckets, exact_nf))


def region_summary(sid: int, lo: int, hi: int, level: int) -> Summary | None:
    """Exact summary of the points in [lo, hi], read from blocks of `level` and finer (raw points at -1)."""
    if lo > hi:
        return None
    if level < 0:
        return summarize(_rows("points", [sid, lo, hi]))
    first, last = _whole_blocks(lo, hi, level)
    if first > last:
        return region_summary(sid, lo, hi, level - 1)
    size = block_size(level)
    inner = Summary()
    for _, *row in _rows("blocks", [sid, level, first, last]):
        inner.merge_row(row)
    inner.merge(region_summary(sid, lo, first * size - 1, level - 1))
    inner.merge(region_summary(sid, (last + 1) * size, hi, level - 1))
    return inner


def tail(series_id: int, after_step: int, limit: int) -> tuple[list[tuple[int, float | None, int]], bool]:
    """Raw points with step > after_step, oldest first, at most `limit`; and whether more were left out."""
    rows = list(Point.objects.filter(series_id=series_id, step__gt=after_step).order_by("step")
                .values_list("step", "value", "special")[: limit + 1])
    return rows[:limit], len(rows) > limit
