"""Writing series: idempotent (series, step) upserts and incremental upkeep of the block pyramid.

Call inside a transaction. A batch buffers points, applies rewinds in order, then writes: points are upserted,
every touched level-0 block is recomputed from its raw points, then each parent from its children, up to the
top level, and the series' totals are re-read from the top level (a handful of rows).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable

from django.db import connection
from django.db.models import Q

from observatory.downsample import FANOUT, LEVELS, PyramidBuilder, Summary, block_size, classify
from webapp.metrics.models import Block, Point, Series

_CLUSTER_GAP = 64  # touched blocks further apart than this are read back by separate range queries


def series_ids(run_id: str, names: Iterable[str]) -> dict[str, int]:
    """name -> Series id for a run, creating the missing series."""
    names = set(names)
    if not names:
        return {}
    found = dict(Series.objects.filter(run_id=run_id, name__in=names).values_list("name", "id"))
    missing = names - found.keys()
    if missing:
        Series.objects.bulk_create([Series(run_id=run_id, name=n) for n in sorted(missing)], ignore_conflicts=True)
        found.update(Series.objects.filter(run_id=run_id, name__in=missing).values_list("name", "id"))
    return found


def _clusters(pairs: Iterable[tuple[int, int]]) -> list[tuple[set[int], int, int]]:
    """(series_id, idx) pairs -> [(series ids, idx_lo, idx_hi)] ranges worth one query each."""
    out: list[tuple[set[int], int, int]] = []
    for sid, idx in sorted(pairs, key=lambda p: p[1]):
        if out and idx - out[-1][2] <= _CLUSTER_GAP:
            sids, lo, _ = out[-1]
            sids.add(sid)
            out[-1] = (sids, lo, idx)
        else:
            out.append(({sid}, idx, idx))
    return out


class SeriesWriter:
    """Buffers one batch of writes to many series; flush() applies them. Use within transaction.atomic()."""

    def __init__(self):
        self.points: dict[tuple[int, int], tuple[float | None, int]] = {}
        self.touched: set[tuple[int, int]] = set()  # (series_id, level-0 block idx)
        self.series: set[int] = set()

    def add(self, series_id: int, step: int, value: float) -> None:
        self.points[(series_id, step)] = classify(value)

    def rewind(self, sids: Iterable[int], to_step: int) -> None:
        """Supersede every point with step > to_step in these series: buffered ones and stored ones."""
        sids = set(sids)
        for key in [k for k in self.points if k[0] in sids and k[1] > to_step]:
            del self.points[key]
        if not sids:
            return
        Point.objects.filter(series_id__in=sids, step__gt=to_step).delete()
        for level in range(LEVELS):
            # blocks wholly after to_step go; the one holding to_step is recomputed below
            Block.objects.filter(series_id__in=sids, level=level, idx__gt=to_step // block_size(level)).delete()
        self.touched.update((sid, to_step // FANOUT) for sid in sids)
        self.series |= sids

    def flush(self) -> None:
        if self.points:
            upsert(Point._meta.db_table, ["series_id", "step", "value", "special"], 2,
                   [(sid, step, v, sp) for (sid, step), (v, sp) in self.points.items()])
            self.touched.update((sid, step // FANOUT) for sid, step in self.points)
            self.series.update(sid for sid, _ in self.points)
        touched = self.touched
        for level in range(LEVELS):
            if not touched:
                break
            _recompute_level(level, touched)
            touched = {(sid, idx // FANOUT) for sid, idx in touched}
        refresh_totals(self.series)
        self.points, self.touched, self.series = {}, set(), set()


def upsert(table: str, cols: list[str], n_key: int, rows: list[tuple], chunk: int = 500) -> None:
    """INSERT ... ON CONFLICT (first n_key cols) DO UPDATE the rest: same SQL on SQLite and PostgreSQL, and
    several times faster than bulk_create(update_conflicts=True), whose per-object model work dominates here."""
    qn = connection.ops.quote_name
    head = (f"INSERT INTO {qn(table)} ({', '.join(qn(c) for c in cols)}) VALUES ")
    tail = (f" ON CONFLICT ({', '.join(qn(c) for c in cols[:n_key])}) DO UPDATE SET "
            + ", ".join(f"{qn(c)} = excluded.{qn(c)}" for c in cols[n_key:]))
    one = "(" + ", ".join(["%s"] * len(cols)) + ")"
    with connection.cursor() as cur:
        for i in range(0, len(rows), chunk):
            part = rows[i:i + chunk]
            cur.execute(head + ", ".join([one] * len(part)) + tail, [v for row in part for v in row])


def _recompute_level(level: int, touched: set[tuple[int, int]]) -> None:
    """Rebuild the touched blocks of `level` from their children (raw points for level 0)."""
    fresh: dict[tuple[int, int], Summary] = {}
    for sids, lo, hi in _clusters(touched):
        if level == 0:
            rows = Point.objects.filter(series_id__in=sids, step__gte=lo * FANOUT,
                                        step__lt=(hi + 1) * FANOUT).values_list("series_id", "step", "value",
                                                                                 "special")
            for sid, step, value, special in rows:
                key = (sid, step // FANOUT)
                if key in touched:
                    fresh.setdefault(key, Summary()).add(step, value, special)
        else:
            rows = Block.objects.filter(series_id__in=sids, level=level - 1, idx__gte=lo * FANOUT,
                                        idx__lt=(hi + 1) * FANOUT).values_list("series_id", "idx",
                                                                               *Block.SUMMARY_FIELDS)
            for sid, idx, *fields in rows:
                key = (sid, idx // FANOUT)
                if key in touched:
                    fresh.setdefault(key, Summary()).merge(Summary(*fields))
    if fresh:
        upsert(Block._meta.db_table, ["series_id", "level", "idx", *Block.SUMMARY_FIELDS], 3,
               [(sid, level, idx, *(getattr(s, f) for f in Block.SUMMARY_FIELDS)) for (sid, idx), s in fresh.items()])
    gone = [key for key in touched if key not in fresh]
    if gone:
        q = Q()
        for sid, idx in gone:
            q |= Q(series_id=sid, idx=idx)
        Block.objects.filter(q, level=level).delete()


def refresh_totals(sids: Iterable[int]) -> None:
    """Series.count/first_step/last_step from the top level of the pyramid (a few rows per series)."""
    sids = set(sids)
    if not sids:
        return
    per: dict[int, Summary] = defaultdict(Summary)
    for sid, *fields in Block.objects.filter(series_id__in=sids, level=LEVELS - 1).values_list(
            "series_id", *Block.SUMMARY_FIELDS):
        per[sid].merge(Summary(*fields))
    rows = []
    for sid in sids:
        s = per.get(sid) or Summary()
        rows.append(Series(id=sid, count=s.count, first_step=s.first_step, last_step=s.last_step))
    Series.objects.bulk_update(rows, ["count", "first_step", "last_step"])


# ---------------------------------------------------------------------------------------------- bulk load
def bulk_load(series_id: int, points: Iterable[tuple[int, float]], chunk: int = 50_000) -> int:
    """Replace a series' contents with `points` ((step, value) in strictly increasing step order), fast.

    For imports and benchmarks: raw rows go in with COPY (PostgreSQL) or executemany (SQLite), the pyramid is
    built while streaming, in memory O(levels). Returns the number of points. Call inside a transaction.
    """
    Point.objects.filter(series_id=series_id).delete()
    Block.objects.filter(series_id=series_id).delete()
    qn = connection.ops.quote_name
    block_cols = ["series_id", "level", "idx", *Block.SUMMARY_FIELDS]
    point_sql = (f"INSERT INTO {qn(Point._meta.db_table)} (series_id, step, value, special) "
                 f"VALUES (%s, %s, %s, %s)")
    block_sql = (f"INSERT INTO {qn(Block._meta.db_table)} ({', '.join(qn(c) for c in block_cols)}) "
                 f"VALUES ({', '.join(['%s'] * len(block_cols))})")
    point_buf: list[tuple] = []
    block_buf: list[tuple] = []
    n = 0

    with connection.cursor() as cur:
        def write(sql, table, cols, buf):
            if not buf:
                return
            if connection.vendor == "postgresql":
                with cur.cursor.copy(f"COPY {qn(table)} ({', '.join(qn(c) for c in cols)}) FROM STDIN") as cp:
                    for row in buf:
                        cp.write_row(row)
            else:
                cur.executemany(sql, buf)
            buf.clear()

        def emit(level, idx, s: Summary):
            block_buf.append((series_id, level, idx, *(getattr(s, f) for f in Block.SUMMARY_FIELDS)))
            if len(block_buf) >= chunk:
                write(block_sql, Block._meta.db_table, block_cols, block_buf)

        builder = PyramidBuilder(emit)
        for step, x in points:
            value, special = classify(x)
            builder.add(step, value, special)
            point_buf.append((series_id, step, value, special))
            n += 1
            if len(point_buf) >= chunk:
                write(point_sql, Point._meta.db_table, ["series_id", "step", "value", "special"], point_buf)
        builder.finish()
        write(point_sql, Point._meta.db_table, ["series_id", "step", "value", "special"], point_buf)
        write(block_sql, Block._meta.db_table, block_cols, block_buf)
        if connection.vendor == "postgresql" and n >= 100_000:
            # fresh statistics, or the planner still believes the tables are small and picks sequential scans
            cur.execute(f"ANALYZE {qn(Point._meta.db_table)}, {qn(Block._meta.db_table)}")
    refresh_totals([series_id])
    return n
