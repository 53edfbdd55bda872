from django.apps import AppConfig


class RunsConfig(AppConfig):
    """Training runs: the Run record, the run list and dashboard pages, the runs API, heartbeat checks."""

    name = "webapp.runs"
    label = "runs"
