from django.apps import AppConfig


class AnnotationsConfig(AppConfig):
    """Annotations on a run's step range with threaded replies, reactions, edit history and moderation."""

    name = "webapp.annotations"
    label = "annotations"
    verbose_name = "Annotations"

    def ready(self):
        from webapp.runs import extensions

        extensions.add_panel("annotations/panel.html")
        # (its marks and panel come after the charts' first paint: loaded then)
        extensions.add_script("js/annotation-thread.js", order=30, lazy=True)
        extensions.add_script("js/annotations.js", order=31, lazy=True)
