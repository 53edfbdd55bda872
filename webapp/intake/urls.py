from django.urls import path

from webapp.intake import views

urlpatterns = [
    path("api/runs/<str:run_id>/telemetry/", views.telemetry, name="api-run-telemetry"),
]
