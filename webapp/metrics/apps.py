from django.apps import AppConfig


class MetricsConfig(AppConfig):
    """Metric series storage (raw points + min/max block pyramid), range queries, and the ingest process."""

    name = "webapp.metrics"
    label = "metrics"

    def ready(self):
        from webapp.metrics import firstpaint
        from webapp.runs import pagedata

        if firstpaint.add_initial not in pagedata.PAGE_EXTRAS:
            pagedata.PAGE_EXTRAS.append(firstpaint.add_initial)
