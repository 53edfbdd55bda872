from django.apps import AppConfig


class AnnotationsConfig(AppConfig):
    """Annotations on a run's step range with threaded replies, reactions, edit history and moderation."""

    name = "webapp.annotations"
    label = "annotations"
    verbose_name = "Annotations"
