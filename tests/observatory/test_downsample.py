"""observatory.downsample: min/max buckets keep every spike; the pyramid equals a brute-force summary."""

import math
import random

import pytest

from observatory import downsample as ds


def _series(n, spikes, seed=0):
    rnd = random.Random(seed)
    values = [1.0 + 0.01 * rnd.random() for _ in range(n)]
    for s in spikes:
        values[s] = 50.0
    return list(range(n)), values


def test_it_keeps_all_five_spikes_of_a_million_points_at_1000():
    n = 1_000_000
    spikes = [123_457, 333_333, 500_001, 777_777, 999_998]
    steps, values = _series(n, spikes)
    w = ds.downsample(steps, values, 1000)
    assert len(w.steps) <= 1000
    assert [s for s, v in zip(w.steps, w.values) if v == 50.0] == spikes
    assert w.count == n


def test_it_returns_every_point_when_under_the_limit():
    w = ds.downsample([3, 1, 2], [0.3, 0.1, 0.2], 10)
    assert w.exact and w.steps == [1, 2, 3] and w.values == [0.1, 0.2, 0.3]


def test_it_keeps_min_and_max_at_their_true_steps():
    steps = list(range(100))
    values = [0.0] * 100
    values[17], values[63] = -5.0, 9.0
    w = ds.downsample(steps, values, 8)
    assert (17, -5.0) in zip(w.steps, w.values)
    assert (63, 9.0) in zip(w.steps, w.values)
    assert w.steps == sorted(w.steps)


def test_it_lists_nan_and_inf_instead_of_dropping_them():
    steps = list(range(1000))
    values = [1.0] * 1000
    values[10], values[500], values[900] = math.nan, math.inf, -math.inf
    w = ds.downsample(steps, values, 100)
    assert w.nonfinite == [(10, "NaN"), (500, "Infinity"), (900, "-Infinity")]
    assert w.counts == {"NaN": 1, "Infinity": 1, "-Infinity": 1}
    assert {s: v for s, v in zip(w.steps, w.values)}[500] is None
    assert len(w.steps) <= 100


def test_it_summarises_a_flood_of_nans_by_representatives():
    steps = list(range(10_000))
    values = [1.0] * 5000 + [math.nan] * 5000
    w = ds.downsample(steps, values, 300)
    assert len(w.steps) <= 300
    assert w.counts["NaN"] == 5000
    assert w.nonfinite[0] == (5000, "NaN")


def test_merge_equals_summary_of_the_union_in_any_order():
    rnd = random.Random(1)
    pts = [(s, *ds.classify(rnd.choice([rnd.random(), math.nan, math.inf]))) for s in range(200)]
    whole = ds.summarize(pts)
    parts = [ds.summarize(pts[i:i + 13]) for i in range(0, 200, 13)]
    rnd.shuffle(parts)
    assert ds.merged(parts) == whole
    row_merged = ds.Summary()
    for p in parts:
        row_merged.merge_row([getattr(p, f) for f in ds.Summary.FIELDS])
    assert row_merged == whole


def test_pyramid_blocks_equal_brute_force_summaries():
    rnd = random.Random(2)
    steps = sorted(rnd.sample(range(5000), 1500))
    pts = [(s, *ds.classify(rnd.choice([rnd.gauss(0, 1)] * 20 + [math.nan]))) for s in steps]
    blocks = {(lvl, idx): s for lvl, idx, s in ds.build_pyramid(pts)}
    for level in range(ds.LEVELS):
        size = ds.block_size(level)
        expect = {}
        for p in pts:
            expect.setdefault(p[0] // size, []).append(p)
        for idx, members in expect.items():
            assert blocks[(level, idx)] == ds.summarize(members)
        assert {i for (lv, i) in blocks if lv == level} == set(expect)


def test_pyramid_builder_rejects_steps_out_of_order():
    b = ds.PyramidBuilder(lambda *a: None)
    b.add(5, 1.0, ds.FINITE)
    with pytest.raises(ValueError):
        b.add(5, 2.0, ds.FINITE)


def test_extremes_bucketing_equals_the_summaries_way_at_every_bucket_width():
    """window_from_extremes (C-level min/max over slices; a bucket a block read straight) answers what merging each
    bucket's Summaries answers, ties (small integers) to the earlier step, edges included."""
    rnd = random.Random(12)
    pts = [(i, float(rnd.randint(0, 5))) for i in range(3_000)]
    blocks = [ds.summarize([(st, v, ds.FINITE) for st, v in pts[a:a + 8]]) for a in range(8, 2_992, 8)]
    left, right = ds.summarize([(st, v, ds.FINITE) for st, v in pts[:8]]), ds.summarize(
        [(st, v, ds.FINITE) for st, v in pts[2_992:]])
    cols = ([b.min_step for b in blocks], [b.min for b in blocks], [b.max for b in blocks],
            [b.max_step for b in blocks])
    for per in (1, 2, 3, 8, 1000):
        buckets = [left] + [ds.Summary().merge(blocks[a]) for a in range(0, len(blocks), per)]
        for k, a in enumerate(range(0, len(blocks), per)):
            for b in blocks[a + 1:a + per]:
                buckets[k + 1].merge(b)
        want = ds.window_from_buckets(buckets + [right], [])
        got = ds.window_from_extremes(*cols, sum(b.count for b in blocks), per, [left, right])
        assert (got.steps, got.values, got.count) == (want.steps, want.values, want.count), per
