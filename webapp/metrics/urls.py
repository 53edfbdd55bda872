from django.urls import path

from webapp.metrics import api

urlpatterns = [
    path("api/compare/", api.compare_runs, name="api-compare"),
    path("api/runs/<str:run_id>/metrics/", api.metric_list, name="api-metrics"),
    path("api/runs/<str:run_id>/windows/", api.metric_windows, name="api-windows"),
    # path converter: metric names contain slashes (train/loss); the trailing slash ends the name
    path("api/runs/<str:run_id>/metrics/<path:name>/", api.metric_series, name="api-metric"),
]
