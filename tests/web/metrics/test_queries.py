"""Series windows from the block pyramid agree with brute force over the raw points, at any zoom."""

import math
import random

import pytest
from django.db import transaction

from observatory import downsample as ds
from webapp.metrics import queries, storage
from webapp.metrics.models import Series
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db


def _load(name, points):
    run, _ = Run.objects.get_or_create(id="q")
    s = Series.objects.create(run=run, name=name)
    with transaction.atomic():
        storage.bulk_load(s.id, points)
    s.refresh_from_db()
    return s


def _check(series, pts, start, end, p):
    win = queries.window(series, start, end, p).window
    inside = [(st, *ds.classify(v)) for st, v in pts if start <= st <= end]
    assert len(win.steps) <= p
    assert win.steps == sorted(win.steps) and all(start <= st <= end for st in win.steps)
    truth = ds.summarize(inside)
    assert win.count == truth.count
    assert win.counts == {"NaN": truth.nan, "Infinity": truth.posinf, "-Infinity": truth.neginf}
    got = dict(zip(win.steps, win.values))
    if truth.max is not None:  # the window's extremes are always drawn, at their true steps
        assert got[truth.max_step] == truth.max and got[truth.min_step] == truth.min
    if truth.ns_step is not None:
        assert got[truth.ns_step] is None
    return win


def test_windows_match_brute_force_on_a_dense_series_with_nonfinite_values():
    rnd = random.Random(5)
    pts = [(i, rnd.gauss(0, 1) if rnd.random() > 0.001 else rnd.choice([math.nan, math.inf, -math.inf]))
           for i in range(200_000)]
    s = _load("dense", pts)
    for _ in range(25):
        a, b = sorted(rnd.randrange(0, 210_000) for _ in range(2))
        _check(s, pts, a, b, rnd.choice([10, 100, 1000, 4000]))
    _check(s, pts, 0, 10**12, 1000)


def test_windows_match_brute_force_on_a_sparse_series():
    rnd = random.Random(6)
    pts = [(i * 997, rnd.random()) for i in range(20_000)]  # an eval metric every ~1000 steps
    s = _load("sparse", pts)
    for _ in range(15):
        a, b = sorted(rnd.randrange(0, 20_000_000) for _ in range(2))
        _check(s, pts, a, b, rnd.choice([10, 300, 1000]))
    full = _check(s, pts, 0, 10**12, 1000)
    assert len(full.steps) >= 500  # sparse data still gets about the resolution asked for


def test_an_empty_or_out_of_range_window_is_empty():
    s = _load("short", [(10, 1.0), (11, 2.0)])
    assert queries.window(s, 100, 200, 100).window.steps == []
    empty = Series.objects.create(run=s.run, name="nothing")
    assert queries.window(empty, 0, 10, 100).as_json()["steps"] == []


def test_the_fast_path_answers_exactly_what_the_general_path_answers(monkeypatch):
    """Dense, all-finite windows are bucketed by C-level min/max over column slices instead of merging rows in
    Python: the same points at the same steps (ties to the earlier step), counts and levels, at every zoom; and a
    window holding a non-finite point, or a gap, takes the general path."""
    rnd = random.Random(7)
    pts = [(i, float(rnd.randint(0, 9))) for i in range(300_000)]  # small integers: ties in every bucket
    pts[123_456] = (123_456, math.nan)
    s = _load("ties", pts)
    gappy = _load("gappy", [(i, float(rnd.randint(0, 9))) for i in range(100_000) if not 40_000 <= i < 40_100])
    cases = [(s, a, a + span, p) for span in (900, 2_000, 5_000, 20_000, 200_000, 300_000)
             for p in (10, 200, 1000, 1200, 1600) for a in (0, 7, 123_000, 150_001)]
    cases += [(gappy, 39_000, 41_000, 1000), (gappy, 0, 99_999, 1200)]
    for series, a, b, p in cases:
        fast = queries.window(series, a, b, p).as_json()
        monkeypatch.setattr(queries, "FAST_PATH", False)
        general = queries.window(series, a, b, p).as_json()
        monkeypatch.setattr(queries, "FAST_PATH", True)
        assert fast == general, (series.name, a, b, p)
    for a, b, p in [(0, 299_999, 1000), (100_000, 130_000, 1200), (0, 3000, 1000)]:
        _check(s, pts, a, b, p)


def test_a_dense_series_is_read_without_counting(monkeypatch):
    """Every step of its span stored (the writers' totals say so): the window's plan needs no COUNT or SUM over the
    index, and answers what counting answers; a series with a gap still counts."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    rnd = random.Random(8)
    dense = _load("every-step", [(i, rnd.random()) for i in range(100_000)])
    gappy = _load("a-gap", [(i, rnd.random()) for i in range(100_000) if i != 50_000])
    for a, b, p in [(0, 99_999, 1000), (1_000, 4_000, 600), (20_000, 60_000, 1200)]:
        with CaptureQueriesContext(connection) as cq:
            fast = queries.window(dense, a, b, p).as_json()
        assert not [q["sql"] for q in cq.captured_queries if "COUNT(" in q["sql"] or "SUM(" in q["sql"]]
        monkeypatch.setattr(queries, "FAST_PATH", False)
        assert queries.window(dense, a, b, p).as_json() == fast
        monkeypatch.setattr(queries, "FAST_PATH", True)
        with CaptureQueriesContext(connection) as cq:
            queries.window(gappy, a, b, p)
        assert [q["sql"] for q in cq.captured_queries if "COUNT(" in q["sql"] or "SUM(" in q["sql"]]


def test_edge_regions_are_exact_and_read_in_two_queries():
    """A window's edge regions (finer blocks, then raw points, on both sides of its whole blocks) are summarised
    exactly, whatever their levels, and read together: one query for all their blocks, one for all their points."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    rnd = random.Random(9)
    pts = [(i, rnd.gauss(0, 1) if rnd.random() > 0.01 else rnd.choice([math.nan, math.inf, -math.inf]))
           for i in range(40_000) if rnd.random() > 0.05]  # gaps too
    s = _load("edges", pts)
    for _ in range(40):
        a, b = sorted(rnd.randrange(0, 41_000) for _ in range(2))
        mid = rnd.randrange(a, b + 1)
        regions = [(a, mid, rnd.randrange(-1, 4)), (mid + 1, b, rnd.randrange(-1, 4))]
        with CaptureQueriesContext(connection) as cq:
            got = queries.run_plans([queries.region_summaries(s.id, regions)])[0]
        assert len(cq.captured_queries) <= 2
        for (lo, hi, _), summary in zip(regions, got):
            truth = ds.summarize([(st, *ds.classify(v)) for st, v in pts if lo <= st <= hi]) if lo <= hi else None
            assert summary == truth or (truth is not None and truth.count == 0 and summary.count == 0), (lo, hi)


def test_a_wide_window_of_a_dense_series_costs_four_queries():
    """Its non-finite points, its two edge regions' blocks and points, and its whole blocks' extremes: four reads
    however deep the edges go (each edge level was a query of its own: eight)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    rnd = random.Random(10)
    s = _load("wide", [(i, rnd.random()) for i in range(300_000)])
    for a, b, p in [(1_234, 201_233, 640), (7, 290_001, 1000), (55_555, 75_554, 640)]:
        with CaptureQueriesContext(connection) as cq:
            win = queries.window(s, a, b, p)
        assert win.level >= 0 and len(cq.captured_queries) <= 4, [q["sql"] for q in cq.captured_queries]


def test_a_wide_window_reads_its_blocks_from_an_index_alone():
    """A level's blocks lie far apart in the table (each written when its span closes): the wide-window read is
    answered from an index holding what it selects (on SQLite, its plan says so)."""
    from django.db import connection

    from webapp.metrics.models import Block

    fields = {f.name for f in Block._meta.get_fields()}
    covering = [ix for ix in Block._meta.indexes
                if ix.fields[:3] == ["series", "level", "idx"] and {"count", "min", "min_step", "max", "max_step"}
                <= set(ix.fields) | set(ix.include or ()) and set(ix.fields) <= fields]
    assert covering
    if connection.vendor == "sqlite":
        with connection.cursor() as cur:
            cur.execute("EXPLAIN QUERY PLAN " + queries._sql("block_extremes").replace("%s", "?"), [1, 2, 0, 10])
            assert "COVERING INDEX" in " ".join(str(r) for r in cur.fetchall())


def test_several_series_read_together_answer_what_each_read_alone_answers():
    """windows() runs every series' plan in lockstep (their plans differ: raw, bucketed, blocks, counted, empty)."""
    rnd = random.Random(11)
    series = [_load("t-dense", [(i, rnd.random()) for i in range(120_000)]),
              _load("t-sparse", [(i * 997, rnd.random()) for i in range(3_000)]),
              _load("t-nonfinite", [(i, math.nan if i % 5000 == 7 else rnd.random()) for i in range(60_000)]),
              _load("t-short", [(5, 1.0), (6, math.inf)])]
    series.append(Series.objects.create(run=series[0].run, name="t-empty"))
    for a, b, p in [(0, 10**9, 640), (1_000, 41_000, 640), (59_000, 61_000, 300), (0, 30, 100), (3, 7, 10)]:
        together = [w.as_json() for w in queries.windows(series, a, b, p)]
        assert together == [queries.window(s, a, b, p).as_json() for s in series], (a, b, p)


def test_a_window_of_a_few_points_a_bucket_is_read_from_its_level0_blocks(monkeypatch):
    """A dense window of 2P to 4P steps (~2,000 steps on a 650-pixel chart) is bucketed from its whole level-0 blocks
    and its two edges: 8x fewer rows than its points, half or more of the buckets asked for (as the block path gives
    at any level), exact as ever, the spike at its step. Narrower, or too sparse for blocks to pay: raw points."""
    rnd = random.Random(12)
    pts = [(i, rnd.gauss(0, 1)) for i in range(50_000)]
    pts[20_003] = (20_003, 40.0)
    s = _load("few-a-bucket", pts)
    sparse = _load("every-5", [(i * 5, rnd.random()) for i in range(10_000)])
    rows = []
    run = queries._run
    monkeypatch.setattr(queries, "_run", lambda stmts: [rows.append(len(r)) or r for r in run(stmts)])
    for a, b, p in [(19_000, 21_000, 653), (18_999, 21_500, 653), (17_001, 21_002, 1000), (0, 2_000, 600)]:
        rows.clear()
        win = queries.window(s, a, b, p)
        assert win.level == 0 and sum(rows) <= (b - a) // 8 + 20, (a, b, p, rows)
        assert 2 * len(win.window.steps) >= (p // 2 - 2) and len(win.window.steps) <= p
        if a <= 20_003 <= b:
            assert dict(zip(win.window.steps, win.window.values))[20_003] == 40.0
        _check(s, pts, a, b, p)
    for series, a, b, p in [(s, 19_000, 20_200, 653), (sparse, 0, 10_000, 653)]:
        assert queries.window(series, a, b, p).level == queries.RAW
