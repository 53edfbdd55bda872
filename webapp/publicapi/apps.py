from django.apps import AppConfig


class PublicApiConfig(AppConfig):
    name = "webapp.publicapi"
    label = "publicapi"
    verbose_name = "Public API: exports, OpenAPI schema, versioning and error shape"
