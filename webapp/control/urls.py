from django.urls import path

from webapp.control import api, views

urlpatterns = [
    path("operate/", views.operate, name="operate"),
    path("runs/<str:run_id>/log/", views.command_log, name="run-log"),
    path("api/operate/", api.operate, name="api-operate"),
    path("api/runs/<str:run_id>/commands/", api.commands, name="api-run-commands"),
    path("api/runs/<str:run_id>/plan/", api.plan_preview, name="api-run-plan"),
    path("api/runs/<str:run_id>/interventions/", api.interventions, name="api-run-interventions"),
]
