from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('metrics', '0003_series_version'),
    ]

    operations = [
        migrations.AddIndex(
            model_name='block',
            index=models.Index(fields=['series', 'level', 'idx', 'count', 'min', 'min_step', 'max', 'max_step'],
                               name='block_extremes'),
        ),
    ]
