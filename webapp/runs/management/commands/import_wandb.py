"""`manage.py import_wandb <offline run dir> [--run-id ID]`: a W&B offline run's history becomes an Observatory run
(series with every point, NaN/Inf kept), watchable like a live one. What the reader could not use is printed."""

from __future__ import annotations

import math
import re
from collections import defaultdict

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from django.utils import timezone

from observatory import contract
from observatory.wandb_reader import WandbReadError, read_run
from webapp.metrics import storage
from webapp.metrics.models import Series
from webapp.runs.models import Health, Run, RunEvent, json_clean

_BAD_RUN_CHARS = re.compile(r"[^A-Za-z0-9_.-]")
_BAD_NAME_CHARS = re.compile(r"[^A-Za-z0-9_./:-]")


def metric_name(key: str) -> str | None:
    """A W&B key -> a contract metric name ("eval loss" -> "eval_loss"), or None if nothing usable is left."""
    name = _BAD_NAME_CHARS.sub("_", key)[: contract.MAX_NAME_LEN]
    return name if contract.METRIC_NAME_RE.match(name) else None


class Command(BaseCommand):
    help = "Import a W&B offline run directory (wandb/offline-run-*) as an Observatory run."

    def add_arguments(self, parser):
        parser.add_argument("path", help="an offline-run-* directory, its run-*.wandb file, or a wandb/ directory")
        parser.add_argument("--run-id", help="Observatory run id (default: wandb-<W&B run id>)")
        parser.add_argument("--name", help="display name (default: the W&B run name)")

    def handle(self, *args, path, run_id=None, name=None, **kw):
        try:
            data = read_run(path)
        except (WandbReadError, OSError) as e:
            raise CommandError(f"cannot read a W&B run at {path}: {e}") from None
        run_id = run_id or _BAD_RUN_CHARS.sub("-", f"wandb-{data['run_id'] or 'run'}")[:64]
        if not contract.RUN_ID_RE.match(run_id):
            raise CommandError(f"--run-id {run_id!r} is not a valid run id ({contract.RUN_ID_RE.pattern})")
        existing = Run.objects.filter(pk=run_id).first()
        if existing and existing.source != "wandb":
            raise CommandError(f"run {run_id!r} exists and was not imported from W&B; choose another --run-id")

        series: dict[str, dict[int, float]] = defaultdict(dict)
        renamed, skipped = {}, list(data["skipped"])
        for row in data["history"]:
            step = row["_step"]
            if not isinstance(step, int) or step < 0:
                skipped.append(f"history row with step {step!r}")
                continue
            for key, value in row.items():
                if key.startswith("_"):  # _step, _runtime, _timestamp: W&B bookkeeping, not metrics
                    continue
                mname = renamed.get(key) or metric_name(key)
                if mname is None:
                    skipped.append(f"values of {key!r}: no usable metric name")
                    renamed[key] = None
                    continue
                if mname != key:
                    renamed[key] = mname
                series[mname][step] = value  # a resumed run's repeated step: the later value wins
        skipped = list(dict.fromkeys(skipped))

        with transaction.atomic():
            run = existing or Run(id=run_id)
            run.name = (name or data["name"] or run_id)[:200]
            run.config = json_clean(data["config"])
            run.source, run.health = "wandb", Health.ENDED
            run.last_step = max((max(pts) for pts in series.values() if pts), default=None)
            run.updated_at = timezone.now()
            run.save()
            Series.objects.filter(run=run).delete()  # a re-import replaces the previous one
            sids = storage.series_ids(run.id, series)
            n_points = 0
            for mname, pts in series.items():
                n_points += storage.bulk_load(sids[mname], ((s, pts[s]) for s in sorted(pts)))
            nonfinite = sum(1 for pts in series.values() for v in pts.values() if not math.isfinite(v))
            RunEvent.objects.create(run=run, kind=RunEvent.KIND_EVENT, name="imported_from_wandb", step=run.last_step,
                                    payload={"path": data.get("path", path), "points": n_points,
                                             "skipped": skipped[:100]})

        self.stdout.write(f"imported W&B run {data['run_id']} as {run.id!r} ({run.name}): {len(series)} series, "
                          f"{n_points} points ({nonfinite} non-finite), last step {run.last_step}")
        for key, mname in sorted((k, v) for k, v in renamed.items() if v):
            self.stdout.write(f"renamed {key!r} -> {mname!r}")
        if skipped:
            self.stdout.write(f"skipped ({len(skipped)}):")
            for line in skipped:
                self.stdout.write(f"  - {line}")
        else:
            self.stdout.write("skipped: nothing")
