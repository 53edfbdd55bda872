"""The experiments app: runs as stated experiments, their pre-registered loss forecasts, public pages and JSON."""

from django.apps import AppConfig


class ExperimentsConfig(AppConfig):
    """Reads the `forecast` events ingest stores (webapp.runs.forecast): no models of its own."""

    name = "webapp.experiments"
    label = "experiments"
    verbose_name = "Experiments"

    def ready(self):
        from webapp.runs import extensions

        extensions.add_script("js/forecast.js", order=50)  # the forecast band on the dashboard's loss charts
        extensions.add_run_list("experiments/_run_list_link.html", order=10)
