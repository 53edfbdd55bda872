"""Writing series: idempotent (series, step) writes and incremental upkeep of the block pyramid, by append or
the general way (docs/ARCHITECTURE.md "Storage"). Call inside a transaction that holds the runs' fence locks
(apply_messages takes them: one writer per run at a time)."""

from __future__ import annotations

import secrets
from collections import defaultdict
from typing import Iterable

from django.db import IntegrityError, connection, transaction
from django.db.models import Q

from observatory.downsample import (
    FANOUT, LEVELS, SHIFT, PyramidBuilder, Summary, block_size, classify, level0_summaries,
)
from webapp.metrics import bulk
from webapp.metrics.models import Block, Point, Series

_CLUSTER_GAP = 64  # touched blocks further apart than this are read back by separate range queries
POINT_COLS = ["series_id", "step", "value", "special"]
BLOCK_COLS = ["series_id", "level", "idx", *Block.SUMMARY_FIELDS]


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
        self.points: dict[int, dict[int, tuple[float | None, int]]] = {}  # series id -> step -> (value, special)
        self.touched: set[tuple[int, int]] = set()  # (series_id, level-0 block idx) for the general path
        self.rewound: set[int] = set()  # series with a rewind in this batch: general path
        self.totals: dict[int, tuple[int, int | None, int | None]] = {}  # series id -> (count, first, last)

    def resolve(self, run_id: str, names: Iterable[str]) -> tuple[dict[str, int], set[str]]:
        """(name -> Series id for a run's names, the names created now); notes the series' stored totals (valid
        for the whole batch: the run's fence lock keeps other writers out)."""
        names = set(names)
        if not names:
            return {}, set()
        table = connection.ops.quote_name(Series._meta.db_table)
        # the run's every series in one plain query: cheaper than an IN list of names through the ORM
        sql = f"SELECT name, id, count, first_step, last_step FROM {table} WHERE run_id = %s"
        with connection.cursor() as cur:
            cur.execute(sql, [run_id])
            rows = [r for r in cur.fetchall() if r[0] in names]
            missing = names - {r[0] for r in rows}
            if missing:
                Series.objects.bulk_create([Series(run_id=run_id, name=n) for n in sorted(missing)],
                                           ignore_conflicts=True)
                cur.execute(sql, [run_id])
                rows = [r for r in cur.fetchall() if r[0] in names]
        for name, sid, count, first, last in rows:
            self.totals[sid] = (count, first, last)
        return {r[0]: r[1] for r in rows}, missing

    def add(self, series_id: int, step: int, value: float) -> None:
        self.points.setdefault(series_id, {})[step] = classify(value)

    def series(self, series_id: int) -> dict[int, tuple[float | None, int]]:
        """The batch's {step: (value, special)} of one series, to fill directly (the hot loop of ingest)."""
        pts = self.points.get(series_id)
        if pts is None:
            pts = self.points[series_id] = {}
        return pts

    def rewind(self, sids: Iterable[int], to_step: int) -> None:
        """Supersede every point with step > to_step in these series: buffered ones and stored ones."""
        sids = set(sids)
        for sid in sids:
            pts = self.points.get(sid)
            if pts:
                for step in [s for s in pts if s > to_step]:
                    del pts[step]
        if not sids:
            return
        Point.objects.filter(series_id__in=sids, step__gt=to_step).delete()
        for level in range(LEVELS):
            # blocks wholly after to_step go; the one holding to_step is recomputed below
            Block.objects.filter(series_id__in=sids, level=level, idx__gt=to_step // block_size(level)).delete()
        self.touched.update((sid, to_step // FANOUT) for sid in sids)
        self.rewound |= sids

    def flush(self) -> None:
        points = {sid: pts for sid, pts in self.points.items() if pts}
        totals = self.totals
        append = {sid: pts for sid, pts in points.items() if sid in totals and sid not in self.rewound
                  and (totals[sid][2] is None or min(pts) > totals[sid][2])}
        general = {sid: pts for sid, pts in points.items() if sid not in append}
        if append:
            try:
                with transaction.atomic():  # a savepoint: an overlap rolls back to here
                    _append(append, totals)
            # PostgreSQL's COPY raises the driver's own IntegrityError, which Django does not wrap.
            except (IntegrityError, connection.Database.IntegrityError):
                general.update(append)
        if general or self.touched:
            self._general(general)
        self.points, self.touched, self.rewound, self.totals = {}, set(), set(), {}

    def _general(self, points: dict[int, dict[int, tuple]]) -> None:
        bulk.upsert(Point, POINT_COLS, 2,
                    [(sid, step, v, sp) for sid, pts in points.items() for step, (v, sp) in pts.items()])
        touched = self.touched | {(sid, step // FANOUT) for sid, pts in points.items() for step in pts}
        for level in range(LEVELS):
            if not touched:
                break
            _recompute_level(level, touched)
            touched = {(sid, idx // FANOUT) for sid, idx in touched}
        refresh_totals(set(points) | self.rewound)


def _append(points: dict[int, dict[int, tuple]], totals: dict[int, tuple]) -> None:
    """The append path: new points only; blocks summarised from the batch, merged with the stored ones."""
    bulk.insert(Point._meta.db_table, POINT_COLS,
                [(sid, step, v, sp) for sid, pts in points.items() for step, (v, sp) in pts.items()])
    levels: list[dict[tuple[int, int], Summary]] = []
    blocks: dict[tuple[int, int], Summary] = {}
    for sid, pts in points.items():
        for idx, summary in level0_summaries(pts):
            blocks[(sid, idx)] = summary
    levels.append(blocks)
    for _ in range(1, LEVELS):
        parents: dict[tuple[int, int], Summary] = {}
        for (sid, idx), s in blocks.items():
            key = (sid, idx >> SHIFT)
            p = parents.get(key)
            if p is None:
                parents[key] = Summary().merge(s)
            else:
                p.merge(s)
        levels.append(parents)
        blocks = parents
    # The stored blocks these extend: at most one per series and level (the one holding its last step).
    where, params = [], []
    for level, blocks in enumerate(levels):
        idxs = [idx for _, idx in blocks]
        where.append("(level = %s AND idx BETWEEN %s AND %s)")
        params += [level, min(idxs), max(idxs)]
    sids = list(points)
    qn = connection.ops.quote_name
    with connection.cursor() as cur:  # plain SQL: the ORM's per-parameter work on a long IN list costs more
        cur.execute(f"SELECT {', '.join(qn(c) for c in BLOCK_COLS)} FROM {qn(Block._meta.db_table)} "
                    f"WHERE series_id IN ({', '.join(['%s'] * len(sids))}) AND ({' OR '.join(where)})",
                    sids + params)
        found = cur.fetchall()
    stored = set()
    for sid, level, idx, *fields in found:
        s = levels[level].get((sid, idx))
        if s is not None:
            s.merge_row(fields)
            stored.add((sid, level, idx))
    new_rows, old_rows = [], []
    for level, blocks in enumerate(levels):
        for (sid, idx), s in blocks.items():
            row = (sid, level, idx, s.count, s.first_step, s.last_step, s.min, s.min_step, s.max, s.max_step,
                   s.nan, s.posinf, s.neginf, s.ns_step, s.ns_kind)
            (old_rows if (sid, level, idx) in stored else new_rows).append(row)
    bulk.insert(Block._meta.db_table, BLOCK_COLS, new_rows)
    bulk.upsert(Block, BLOCK_COLS, 3, old_rows)
    rows = []
    for sid, pts in points.items():
        n, first, last = totals[sid]
        lo, hi = min(pts), max(pts)
        rows.append((n + len(pts), lo if first is None else min(first, lo), hi if last is None else max(last, hi),
                     new_version(), sid))
    with connection.cursor() as cur:
        cur.executemany(f"UPDATE {connection.ops.quote_name(Series._meta.db_table)} "
                        f"SET count = %s, first_step = %s, last_step = %s, version = %s WHERE id = %s", rows)


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
        bulk.upsert(Block, BLOCK_COLS, 3, [(sid, level, idx, *(getattr(s, f) for f in Block.SUMMARY_FIELDS))
                                                          for (sid, idx), s in fresh.items()])
    gone = [key for key in touched if key not in fresh]
    if gone:
        q = Q()
        for sid, idx in gone:
            q |= Q(series_id=sid, idx=idx)
        Block.objects.filter(q, level=level).delete()


def refresh_totals(sids: Iterable[int]) -> None:
    """Series.count/first_step/last_step from the top level of the pyramid (a few rows per series), and a new
    Series.version."""
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
        rows.append(Series(id=sid, count=s.count, first_step=s.first_step, last_step=s.last_step,
                           version=new_version()))
    Series.objects.bulk_update(rows, ["count", "first_step", "last_step", "version"])


def new_version() -> int:
    """A series' next Series.version: random (a deleted series' id may come back with a new series, SQLite reuses
    row ids, so a counter could repeat an old series' (id, version)), never 0 (never written)."""
    return 1 + secrets.randbelow(2**62)


# ---------------------------------------------------------------------------------------------- bulk load
def bulk_load(series_id: int, points: Iterable[tuple[int, float]], chunk: int = 50_000) -> int:
    """Replace a series' contents with `points` ((step, value) in strictly increasing step order), fast.

    For imports and benchmarks: raw rows go in with COPY (PostgreSQL) or executemany (SQLite), the pyramid is
    built while streaming, in memory O(levels). Returns the number of points. Call inside a transaction.
    """
    Point.objects.filter(series_id=series_id).delete()
    Block.objects.filter(series_id=series_id).delete()
    point_buf: list[tuple] = []
    block_buf: list[tuple] = []
    n = 0

    def emit(level, idx, s: Summary):
        block_buf.append((series_id, level, idx, *(getattr(s, f) for f in Block.SUMMARY_FIELDS)))
        if len(block_buf) >= chunk:
            bulk.insert(Block._meta.db_table, BLOCK_COLS, block_buf)
            block_buf.clear()

    builder = PyramidBuilder(emit)
    for step, x in points:
        value, special = classify(x)
        builder.add(step, value, special)
        point_buf.append((series_id, step, value, special))
        n += 1
        if len(point_buf) >= chunk:
            bulk.insert(Point._meta.db_table, POINT_COLS, point_buf)
            point_buf.clear()
    builder.finish()
    bulk.insert(Point._meta.db_table, POINT_COLS, point_buf)
    bulk.insert(Block._meta.db_table, BLOCK_COLS, block_buf)
    if connection.vendor == "postgresql" and n >= 100_000:
        # fresh statistics, or the planner still believes the tables are small and picks sequential scans
        with connection.cursor() as cur:
            qn = connection.ops.quote_name
            cur.execute(f"ANALYZE {qn(Point._meta.db_table)}, {qn(Block._meta.db_table)}")
    refresh_totals([series_id])
    return n
