"""`manage.py import_tensorboard <logdir> [--run-prefix P] [--owner USER] [--no-wall-times]`: every run of a
TensorBoard logdir (each directory holding event files) becomes an Observatory run, every scalar tag a series
with all its steps (values exactly as TensorBoard stored them, NaN/Inf kept) and its wall times. Repeatable: a
second import writes nothing, one after more events were appended writes only those (webapp/transfer/tb_import.py
documents the run-id and metric-name mapping). Errors exit 2: a missing logdir, one without event files, a corrupt
event file (that run is not written at all; the others are imported)."""

from __future__ import annotations

import time

from django.core.management.base import BaseCommand, CommandError

from observatory import contract

from webapp.transfer import imports, tb_file, tb_import


class Command(BaseCommand):
    help = "Import a TensorBoard logdir (every run, every scalar tag) as Observatory runs."

    def add_arguments(self, parser):
        parser.add_argument("logdir", help="the directory TensorBoard's --logdir would name")
        parser.add_argument("--run-prefix", default=tb_import.DEFAULT_PREFIX,
                            help=f"prefix of the run ids (default {tb_import.DEFAULT_PREFIX!r})")
        parser.add_argument("--owner", help="user whose write tokens may append to the runs over HTTP (default: "
                                            "nobody's)")
        parser.add_argument("--no-wall-times", action="store_true",
                            help="do not keep each tag's wall times as wall_time/<metric> series")

    def handle(self, *args, logdir, run_prefix, owner=None, no_wall_times=False, **kw):
        say = self.stdout.write
        try:
            owner = imports.owner_user(owner)
        except ValueError as e:
            raise CommandError(str(e), returncode=2) from None
        if run_prefix and not contract.RUN_ID_RE.match(run_prefix):  # the start of a run id
            raise CommandError(f"--run-prefix {run_prefix!r}: must be {contract.RUN_ID_RULE}", returncode=2)
        try:
            runs = tb_file.find_runs(logdir)
        except tb_file.TBReadError as e:
            raise CommandError(str(e), returncode=2) from None
        ids = tb_import.assign_run_ids(runs, run_prefix, logdir, owner)
        total = sum(r.bytes for r in runs)
        say(f"{logdir}: {len(runs)} run(s), {sum(len(r.files) for r in runs)} event file(s), {total / 1e6:.1f} MB")
        failed: list[str] = []
        done = 0
        for i, run in enumerate(runs, 1):
            run_id, _ = ids[run.rel]
            started = time.monotonic()
            say(f"[{i}/{len(runs)}] {run.rel} -> {run_id}: reading {len(run.files)} file(s), {run.bytes / 1e6:.1f} MB")
            try:
                tb_file.read_run(run, progress=lambda n, rid=run_id: say(f"  {rid}: {n:,} values read"))
            except tb_file.TBReadError as e:
                failed.append(f"{run.rel}: {e}")
                say(self.style.ERROR(f"  {run_id}: not imported: {e}"))
                continue
            res = tb_import.import_run(run, run_id, logdir, run_prefix, owner, wall_times=not no_wall_times,
                                       say=say)
            run.tags.clear()  # free the run's values before reading the next
            done += 1
            if res.series == 0:
                say(f"  {run_id}: no scalar values, nothing imported")
            elif res.up_to_date:
                say(f"  {run_id}: up to date ({res.same:,} points already stored)")
            else:
                say(f"  {run_id} ({res.name}): {res.series} series, {res.new:,} new points, {res.changed:,} changed, "
                    f"{res.same:,} already stored, {res.nonfinite:,} non-finite values, last step {res.last_step}"
                    f" ({time.monotonic() - started:.1f} s)")
            for tag, mname in sorted(res.renamed.items()):
                say(f"  renamed {tag!r} -> {mname!r}")
            for line in res.skipped:
                say(f"  skipped: {line}")
        if failed:
            raise CommandError(f"{len(failed)} of {len(runs)} run(s) not imported ({done} imported):\n  "
                               + "\n  ".join(failed), returncode=2)
        say(f"done: {done} run(s) of {logdir} imported or up to date")
