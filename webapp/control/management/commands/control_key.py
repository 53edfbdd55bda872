"""`manage.py control_key <run-id> [--rotate]`: print one run's control key (for that run's trainer and its operators'
CLI, as OBS_RUN_CONTROL_KEY); --rotate first moves that run, and only it, to a new key."""

from django.db import transaction
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from observatory import contract
from webapp.control import channel
from webapp.control.models import RunControlKey


class Command(BaseCommand):
    help = ("Print a run's control key (derived from the web tier's master key); --rotate gives the run a new one "
            "(restart its trainer with it; other runs keep theirs).")

    def add_arguments(self, parser):
        parser.add_argument("run_id")
        parser.add_argument("--rotate", action="store_true", help="move the run to a new key first")

    def handle(self, run_id, rotate=False, **options):
        if not contract.RUN_ID_RE.match(run_id):
            raise CommandError(f"bad run id {run_id!r}")
        if rotate:
            with transaction.atomic():
                row, _ = RunControlKey.objects.select_for_update().get_or_create(pk=run_id)
                row.generation += 1
                row.rotated_at = timezone.now()
                row.save()
        try:
            key = channel.run_key(run_id)
        except channel.NoControlKey as e:
            raise CommandError(str(e)) from None
        generation = RunControlKey.generation_of(run_id)
        self.stderr.write(f"run {run_id}: control key generation {generation}"
                          + (" (rotated: restart its trainer with this key; commands signed with the old one are "
                             "refused)" if rotate else ""))
        self.stdout.write(f"{contract.RUN_CONTROL_KEY_ENV}={key.decode()}")
