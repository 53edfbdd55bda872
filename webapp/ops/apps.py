from django.apps import AppConfig


class OpsConfig(AppConfig):
    """/healthz and /metrics. Later apps (live) register their in-process collectors in webapp.ops.exposition."""

    name = "webapp.ops"
    label = "ops"
