from django.apps import AppConfig


class ControlConfig(AppConfig):
    name = "webapp.control"
    label = "control"
    verbose_name = "Operator commands"

    def ready(self):
        from webapp.runs import extensions

        extensions.add_header("control/_run_link.html", order=20)
        extensions.add_script("js/interventions.js", order=40)
