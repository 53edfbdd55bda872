"""`manage.py export_wandb <run id> --dir DIR [--project P]`: the run's every stored point as a W&B offline run
(DIR/wandb/offline-run-*/), written by wandb in offline mode with no network; upload it later with `wandb sync`,
or read it back with `import_wandb`."""

from __future__ import annotations

import time

from django.core.management.base import BaseCommand, CommandError

from webapp.runs.models import Run
from webapp.transfer import wandb_export
from webapp.transfer.wandb_file import WandbReadError, read_run

FINISH_TIMEOUT_S = 120.0  # wandb's service writes the run's exit record after finish() returns


class Command(BaseCommand):
    help = "Export an Observatory run as a W&B offline run directory (for `wandb sync`)."

    def add_arguments(self, parser):
        parser.add_argument("run_id")
        parser.add_argument("--dir", required=True, help="W&B writes DIR/wandb/offline-run-*/")
        parser.add_argument("--project", default="observatory", help="W&B project for a later sync")

    def handle(self, *args, run_id, dir, project, **kw):
        run = Run.objects.filter(pk=run_id).first()
        if run is None:
            raise CommandError(f"no run {run_id!r}", returncode=2)
        if not run.series.exists():
            raise CommandError(f"run {run_id!r} has no series to export", returncode=2)
        try:
            out = wandb_export.export(run, dir, project,
                                      progress=lambda n: self.stdout.write(f"  {n:,} steps logged"))
        except OSError as e:
            raise CommandError(f"cannot write to {dir}: {e}", returncode=2) from None
        if not out["path"]:
            raise CommandError("wandb did not create an offline run directory", returncode=2)
        deadline = time.monotonic() + FINISH_TIMEOUT_S
        while not self._finished(out["path"]):
            if time.monotonic() > deadline:
                raise CommandError(f"W&B did not finish writing {out['path']} within {FINISH_TIMEOUT_S:.0f} s",
                                   returncode=2)
            time.sleep(0.1)
        self.stdout.write(f"exported {run.id!r}: {out['steps']:,} steps, {out['points']:,} points to {out['path']}")
        self.stdout.write(f"upload with: wandb sync {out['path']}")

    @staticmethod
    def _finished(path: str) -> bool:
        try:
            return read_run(path)["exit_code"] is not None
        except (WandbReadError, OSError):
            return False
