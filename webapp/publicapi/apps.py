from django.apps import AppConfig


class PublicApiConfig(AppConfig):
    name = "webapp.publicapi"
    label = "publicapi"
    verbose_name = "Public API: exports, OpenAPI schema, versioning and error shape"

    def ready(self):
        from webapp.runs import extensions

        extensions.add_header("publicapi/_run_downloads.html", order=40)  # the whole run, as files
