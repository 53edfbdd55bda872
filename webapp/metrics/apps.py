from django.apps import AppConfig


class MetricsConfig(AppConfig):
    """Metric series storage (raw points + min/max block pyramid), range queries, and the ingest process."""

    name = "webapp.metrics"
    label = "metrics"
