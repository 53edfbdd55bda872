"""Routes: the experiment list and pages, a run's forecast as JSON."""

from django.urls import path

from webapp.experiments import views

urlpatterns = [
    path("experiments/", views.experiment_list, name="experiment-list"),
    # path converter: an experiment's name is free text (it is URL-quoted in links)
    path("experiments/<path:name>/", views.experiment_detail, name="experiment-detail"),
    path("api/runs/<str:run_id>/forecast/", views.run_forecast, name="api-run-forecast"),
]
