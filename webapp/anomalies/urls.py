"""Routes: the anomaly log page and its triage post, the JSON API."""

from django.urls import path

from webapp.anomalies import api, views

urlpatterns = [
    path("runs/<str:run_id>/anomalies/", views.anomaly_log, name="run-anomalies"),
    path("runs/<str:run_id>/anomalies/<int:pk>/triage/", views.anomaly_triage, name="run-anomaly-triage"),
    path("api/runs/<str:run_id>/anomalies/", api.anomaly_list, name="api-run-anomalies"),
    path("api/runs/<str:run_id>/anomalies/<int:pk>/", api.anomaly_triage, name="api-run-anomaly"),
]
