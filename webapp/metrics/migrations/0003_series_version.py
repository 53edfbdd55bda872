import secrets

from django.db import migrations, models


def backfill(apps, schema_editor):
    """Series written before this migration get a version of their own (0 is left to never-written ones)."""
    Series = apps.get_model("metrics", "Series")
    for sid in Series.objects.filter(first_step__isnull=False).values_list("id", flat=True).iterator():
        Series.objects.filter(id=sid).update(version=1 + secrets.randbelow(2**62))


class Migration(migrations.Migration):

    dependencies = [
        ('metrics', '0002_ingest_fence'),
    ]

    operations = [
        migrations.AddField(
            model_name='series',
            name='version',
            field=models.BigIntegerField(default=0),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
    ]
