from django.urls import path

from webapp.control import api

urlpatterns = [
    path("api/runs/<str:run_id>/commands/", api.commands, name="api-run-commands"),
]
