"""The query bench's data sets (bench/query.py; they measure nothing): synthetic runs written into the database,
the query's own timing around them where it reports one. Needs Django set up.

- `query_run(n)`: one n-point loss curve (a noisy decay) with a 50.0 spike at each of `spikes(n)`;
- `export_run(n)`: one n-point series of raw points, bulk-inserted;
- `seed_preview(steps)`, `extend_preview(steps, more)`: the link-preview run, and the same run advanced;
- `load_windows_run(steps, n_series)`: series of noisy decays, series i spiking at `windows_spike(steps, i)`.
"""

from __future__ import annotations

import math
import random

from stack import load_series

BENCH_RUN, WIN_RUN, EXPORT_RUN, PREVIEW_RUN = "bench-query", "bench-windows", "bench-export", "bench-ogimage"


def spikes(n: int) -> list[int]:
    return [n // 7, 2 * n // 7 + 11, n // 2 + 3, 5 * n // 7 + 1, n - 2]


def query_run(n: int, name: str):
    """The query run afresh: its series `name`, n points, 50.0 at spikes(n)."""
    from webapp.runs.models import Run

    Run.objects.filter(pk=BENCH_RUN).delete()
    run = Run.objects.create(id=BENCH_RUN, name="query benchmark")
    rnd = random.Random(0)
    spike_set = set(spikes(n))
    return load_series(run, name, ((i, 50.0 if i in spike_set else 2.0 + 3.0 * math.exp(-i / (n / 5))
                                    + rnd.random() * 0.05) for i in range(n)))


def export_run(n: int):
    """The export run afresh: its train/loss series of n raw points (bulk COPY/executemany, no pyramid)."""
    from webapp.metrics import bulk, storage
    from webapp.metrics.models import Point, Series
    from webapp.runs.models import Run

    Run.objects.filter(pk=EXPORT_RUN).delete()
    run = Run.objects.create(id=EXPORT_RUN, name="export benchmark", state="stopped")
    s = Series.objects.create(run=run, name="train/loss")
    for lo in range(0, n, 200_000):
        bulk.insert(Point._meta.db_table, storage.POINT_COLS,
                    [(s.id, i, 2.0 + ((i * 7919) % 1000) / 997.0, 0) for i in range(lo, min(n, lo + 200_000))])
    Series.objects.filter(pk=s.pk).update(count=n, first_step=0, last_step=n - 1)
    return run


def seed_preview(steps: int) -> None:
    from webapp.metrics.models import Series
    from webapp.runs.models import Run

    if Series.objects.filter(run_id=PREVIEW_RUN, name="train/loss", count=steps).exists():
        return
    Run.objects.filter(pk=PREVIEW_RUN).delete()
    run = Run.objects.create(id=PREVIEW_RUN, name="og:image benchmark", state="training", last_step=steps - 1)
    load_series(run, "train/loss", ((i, 2.0 + 3.0 / math.sqrt(1 + i / 500) + (5.0 if i == steps // 3 else 0.0))
                                    for i in range(steps)))


def extend_preview(steps: int, more: int) -> None:
    """Append `more` points through the ingest write path's storage (a run advancing)."""
    from django.db import transaction

    from webapp.metrics import storage
    from webapp.metrics.models import Series
    from webapp.runs.models import Run

    s = Series.objects.get(run_id=PREVIEW_RUN, name="train/loss")
    with transaction.atomic():
        storage.bulk_load(s.id, ((i, 2.0 + 3.0 / math.sqrt(1 + i / 500)) for i in range(steps + more)))
    Run.objects.filter(pk=PREVIEW_RUN).update(last_step=steps + more - 1)


def windows_spike(steps: int, i: int) -> int:
    return steps // 2 + 37 * i


def load_windows_run(steps: int, n_series: int) -> list[str]:
    """A run of n_series series, `steps` points each (noisy decays, a one-step spike in each), loaded once."""
    from webapp.metrics.models import Series
    from webapp.runs.models import Run

    names = [f"bench/s{i}" for i in range(n_series)]
    have = Series.objects.filter(run_id=WIN_RUN, name__in=names, count=steps).count()
    if have == n_series:
        return names
    Run.objects.filter(pk=WIN_RUN).delete()
    run = Run.objects.create(id=WIN_RUN, name="windows benchmark", state="stopped")
    rnd = random.Random(1)
    for i, name in enumerate(names):
        spike = windows_spike(steps, i)
        load_series(run, name, ((k, 50.0 if k == spike else 2.0 + (i + 1) * math.exp(-k / (steps / 5))
                                 + rnd.random() * 0.05) for k in range(steps)))
    return names
