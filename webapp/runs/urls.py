from django.urls import path

from webapp.runs import api, compare, views

urlpatterns = [
    path("runs/", views.run_list, name="run-list"),  # `/` is the front page (webapp/front)
    path("runs/<str:run_id>/", views.dashboard, name="run-dashboard"),
    path("compare/", compare.compare_page, name="compare"),
    path("api/runs/", api.runs, name="api-runs"),
    path("api/runs/<str:run_id>/", api.run_detail, name="api-run"),
]
