import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True
    dependencies = [migrations.swappable_dependency(settings.AUTH_USER_MODEL), ("runs", "0001_initial")]

    operations = [
        migrations.CreateModel(
            name="OperatorCommand",
            fields=[
                ("id", models.CharField(max_length=200, primary_key=True, serialize=False)),
                ("name", models.CharField(max_length=40)),
                ("args", models.JSONField(default=dict)),
                ("reason", models.TextField()),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("status", models.CharField(default="sent", max_length=16)),
                ("detail", models.TextField(blank=True)),
                ("step", models.BigIntegerField(null=True)),
                ("updated_at", models.DateTimeField(auto_now=True)),
                ("run", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="commands",
                                          to="runs.run")),
                ("user", models.ForeignKey(null=True, on_delete=django.db.models.deletion.SET_NULL,
                                           to=settings.AUTH_USER_MODEL)),
            ],
            options={"ordering": ["-created_at"],
                     "indexes": [models.Index(fields=["run", "-created_at"], name="control_ope_run_id_827681_idx")]},
        ),
    ]
