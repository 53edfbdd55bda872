from django.apps import AppConfig


class MetricsConfig(AppConfig):
    """Metric series storage (raw points + min/max block pyramid), range queries, and the ingest process."""

    name = "webapp.metrics"
    label = "metrics"

    def ready(self):
        from webapp.metrics import firstpaint
        from webapp.runs import extensions

        extensions.add_page_data(firstpaint.add_initial)
        extensions.add_header("metrics/_run_link.html", order=30)
        extensions.add_run_list("metrics/_compare_form.html", order=20)
