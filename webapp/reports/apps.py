from django.apps import AppConfig


class ReportsConfig(AppConfig):
    """Reports (Markdown write-ups with live chart, annotation, anomaly, forecast and comparison blocks) and embeds
    (one live chart for other sites' iframes, with oEmbed discovery)."""

    name = "webapp.reports"
    label = "reports"
    verbose_name = "Reports"

    def ready(self):
        from webapp.reports.citations import add_page_data
        from webapp.runs import extensions

        extensions.add_page_data(add_page_data)
