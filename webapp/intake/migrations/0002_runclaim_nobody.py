"""A claim may belong to nobody (user NULL): imported runs, and runs of deleted users, are nobody's to write.

Runs imported before importers claimed their runs (source other than "stream") get a nobody claim here, so an
HTTP publisher can no longer claim them (issue 16)."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def claim_imported_runs(apps, schema_editor):
    Run = apps.get_model("runs", "Run")
    RunClaim = apps.get_model("intake", "RunClaim")
    claimed = set(RunClaim.objects.values_list("run_id", flat=True))
    ids = [rid for rid in Run.objects.exclude(source="stream").values_list("id", flat=True) if rid not in claimed]
    RunClaim.objects.bulk_create([RunClaim(run_id=rid, user=None) for rid in ids], ignore_conflicts=True)


class Migration(migrations.Migration):

    dependencies = [
        ("intake", "0001_initial"),
        ("runs", "0001_initial"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterField(
            model_name="runclaim",
            name="user",
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL,
                                    related_name="run_claims", to=settings.AUTH_USER_MODEL),
        ),
        migrations.RunPython(claim_imported_runs, migrations.RunPython.noop),
    ]
