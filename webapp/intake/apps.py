from django.apps import AppConfig


class IntakeConfig(AppConfig):
    name = "webapp.intake"
    label = "intake"
    verbose_name = "HTTP telemetry intake"
