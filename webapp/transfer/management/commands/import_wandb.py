"""`manage.py import_wandb <offline run dir> [--run-id ID]`: a W&B offline run's history becomes an Observatory run
(series with every point, NaN/Inf kept), watchable like a live one. What the reader could not use is printed."""

from __future__ import annotations

import re

from django.core.management.base import BaseCommand, CommandError

from observatory import contract
from webapp.runs.models import Run
from webapp.transfer import imports, wandb_import
from webapp.transfer.wandb_file import WandbReadError, read_run

_BAD_RUN_CHARS = re.compile(f"[^{contract.RUN_ID_CHARS}]")


class Command(BaseCommand):
    help = "Import a W&B offline run directory (wandb/offline-run-*) as an Observatory run."

    def add_arguments(self, parser):
        parser.add_argument("path", help="an offline-run-* directory, its run-*.wandb file, or a wandb/ directory")
        parser.add_argument("--run-id", help="Observatory run id (default: wandb-<W&B run id>)")
        parser.add_argument("--name", help="display name (default: the W&B run name)")
        parser.add_argument("--owner", help="user whose write tokens may append to the run over HTTP (default: "
                                            "nobody's)")

    def handle(self, *args, path, run_id=None, name=None, owner=None, **kw):
        try:
            owner = imports.owner_user(owner)
        except ValueError as e:
            raise CommandError(str(e), returncode=2) from None
        try:
            data = read_run(path)
        except (WandbReadError, OSError) as e:
            raise CommandError(f"cannot read a W&B run at {path}: {e}", returncode=2) from None
        run_id = run_id or _BAD_RUN_CHARS.sub("-", f"wandb-{data['run_id'] or 'run'}")[:64]
        if not contract.RUN_ID_RE.match(run_id):
            raise CommandError(f"--run-id {run_id!r} is not a valid run id ({contract.RUN_ID_RULE})",
                               returncode=2)
        if Run.objects.filter(pk=run_id).exclude(source=wandb_import.SOURCE).exists():
            raise CommandError(f"run {run_id!r} exists and was not imported from W&B; choose another --run-id",
                               returncode=2)
        # a previous import's claim is its own; a claim without a run is an HTTP publisher's run on its way in
        blocked = not Run.objects.filter(pk=run_id).exists() and imports.claim_blocks(run_id, owner)
        if blocked:
            raise CommandError(f"{blocked}; choose another --run-id", returncode=2)

        imp = wandb_import.plan(data, run_id, name)
        run = wandb_import.write(imp, owner)

        self.stdout.write(f"imported W&B run {data['run_id']} as {run.id!r} ({run.name}): {imp.series} series, "
                          f"{imp.points} points ({imp.nonfinite} non-finite), last step {run.last_step}")
        for key, mname in sorted(imp.renamed.items()):
            self.stdout.write(f"renamed {key!r} -> {mname!r}")
        if imp.skipped:
            self.stdout.write(f"skipped ({len(imp.skipped)}):")
            for line in imp.skipped:
                self.stdout.write(f"  - {line}")
        else:
            self.stdout.write("skipped: nothing")
