"""Every run gets an owner record (issue 22): a claim's kind says who claimed it, and every run without a claim
gets one. A live ("stream") run without a claim was published straight into Redis: the trainer's (before, only
Redis's run set kept it from any member's write token). An imported run without one is nobody's."""

from django.db import migrations, models

IMPORTED_SOURCES = ("wandb", "tensorboard")  # webapp.runs.models.IMPORTED_SOURCES when this was written


def backfill(apps, schema_editor):
    Run = apps.get_model("runs", "Run")
    RunClaim = apps.get_model("intake", "RunClaim")
    imported = set(Run.objects.filter(source__in=IMPORTED_SOURCES).values_list("id", flat=True))
    RunClaim.objects.filter(run_id__in=imported).update(kind="import")
    claimed = set(RunClaim.objects.values_list("run_id", flat=True))
    RunClaim.objects.bulk_create(
        [RunClaim(run_id=rid, user=None, kind="import" if rid in imported else "trainer")
         for rid in Run.objects.values_list("id", flat=True) if rid not in claimed], ignore_conflicts=True)


class Migration(migrations.Migration):

    dependencies = [
        ("intake", "0002_runclaim_nobody"),
        ("runs", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="runclaim",
            name="kind",
            field=models.CharField(choices=[("trainer", "trainer"), ("publisher", "publisher"), ("import", "import")],
                                   default="publisher", max_length=12),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
    ]
