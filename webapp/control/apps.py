from django.apps import AppConfig


class ControlConfig(AppConfig):
    name = "webapp.control"
    label = "control"
    verbose_name = "Operator commands"
