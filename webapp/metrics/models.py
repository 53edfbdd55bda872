"""Series storage: raw points for narrow windows, a min/max block pyramid for wide ones (observatory.downsample).

A full-range query over N points reads a few thousand Block rows at the coarsest sufficient level instead of
N Point rows; every block keeps its min and max at their true steps, so spikes survive any zoom.
"""

from __future__ import annotations

from django.db import models

from observatory.downsample import Summary
from webapp.runs.models import Run

EXTREME_FIELDS = ("count", "min", "min_step", "max", "max_step")  # a Block's columns a wide window's buckets read


class Series(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="series", db_index=False)  # see below
    name = models.CharField(max_length=200)
    # Totals kept by the writers (from the top pyramid level) so that queries clip to real data cheaply.
    count = models.BigIntegerField(default=0)
    first_step = models.BigIntegerField(null=True)
    last_step = models.BigIntegerField(null=True)
    # A new random token with every write to the series' points (webapp/metrics/storage.py, in the writing
    # transaction; 0: never written): what a cache of its windows keys on (firstpaint.py), never serving one stale.
    version = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            # serves: (run, name) lookups in the API and ingest, and a run's series listed by name
            models.UniqueConstraint(fields=["run", "name"], name="series_run_name"),
        ]

    def __str__(self):
        return f"{self.run_id}:{self.name}"


class Point(models.Model):
    """One value at one step. Non-finite values have value NULL and special = NAN/POSINF/NEGINF
    (SQLite would turn a stored NaN into NULL silently; a diverged loss must never vanish)."""

    # serves: every raw range read (series, step BETWEEN a AND b ORDER BY step) and the (series, step) upsert
    pk = models.CompositePrimaryKey("series_id", "step")
    # No database-level constraint: on PostgreSQL its per-row check cost more than the row itself (3.5 of 5.7 µs
    # of server CPU per point in bench/ingest.py). The writers create a batch's series first, in the same
    # transaction; deletes cascade through the ORM (Series/Run.delete()), as Django always does.
    series = models.ForeignKey(Series, on_delete=models.CASCADE, db_index=False, db_constraint=False)
    step = models.BigIntegerField()
    value = models.FloatField(null=True)
    special = models.SmallIntegerField(default=0)  # observatory.downsample FINITE / NAN / POSINF / NEGINF

    class Meta:
        indexes = [
            # serves: "which points in this window are non-finite?" without scanning the finite ones
            models.Index(fields=["series", "step"], condition=models.Q(special__gt=0), name="point_nonfinite"),
        ]


class Block(models.Model):
    """Summary of the points with step in [idx * 8**(level+1), (idx+1) * 8**(level+1))."""

    # serves: blocks of one level in an index range (the wide-window read) and the per-block upsert
    pk = models.CompositePrimaryKey("series_id", "level", "idx")
    series = models.ForeignKey(Series, on_delete=models.CASCADE, db_index=False, db_constraint=False)  # as Point
    level = models.SmallIntegerField()
    idx = models.BigIntegerField()
    count = models.BigIntegerField()
    first_step = models.BigIntegerField()
    last_step = models.BigIntegerField()
    min = models.FloatField(null=True)  # over finite values only; NULL when the block has none
    min_step = models.BigIntegerField(null=True)
    max = models.FloatField(null=True)
    max_step = models.BigIntegerField(null=True)
    nan = models.BigIntegerField(default=0)
    posinf = models.BigIntegerField(default=0)
    neginf = models.BigIntegerField(default=0)
    ns_step = models.BigIntegerField(null=True)  # first non-finite point in the block, and its kind
    ns_kind = models.SmallIntegerField(default=0)

    SUMMARY_FIELDS = Summary.FIELDS  # the columns above that hold an observatory.downsample.Summary, in its order
    EXTREME_FIELDS = EXTREME_FIELDS

    class Meta:
        indexes = [
            # serves: the wide-window read (webapp/metrics/queries.py "block_extremes") from the index alone. A level's
            # blocks lie far apart in the table (written as their spans close, between finer ones): through the
            # primary key each row cost a page read of its own (~6 us in SQLite); here they are one run of leaves.
            models.Index(fields=["series", "level", "idx", *EXTREME_FIELDS], name="block_extremes"),
        ]


class IngestFence(models.Model):
    """Who may write a run's telemetry. An ingest consumer bumps `epoch` when it takes the run's lease (Redis) and
    writes a batch only while the row, locked for the batch's transaction, still holds its epoch: a consumer that
    lost its lease (paused, partitioned) can never commit after its successor. The lock also serialises every
    writer of the run's series (ingest, imports), which makes the pyramid's read-modify-write safe under
    PostgreSQL's READ COMMITTED. No foreign key: a batch may lock a run before its first message creates it."""

    run_id = models.CharField(primary_key=True, max_length=64)
    epoch = models.BigIntegerField(default=0)
