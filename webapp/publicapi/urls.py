"""Routes: exports, the events list, the OpenAPI schema and its page (every one also under /api/v1/)."""

from django.urls import path

from webapp.publicapi import views

urlpatterns = [
    path("api/schema/", views.schema, name="api-schema"),
    path("api/docs/", views.docs, name="api-docs"),
    path("api/runs/<str:run_id>/events/", views.events, name="api-run-events"),
    path("api/runs/<str:run_id>/export.csv", views.export_series, {"fmt": "csv"}, name="api-export-csv"),
    path("api/runs/<str:run_id>/export.json", views.export_series, {"fmt": "json"}, name="api-export-json"),
    path("api/runs/<str:run_id>/export.parquet", views.export_series, {"fmt": "parquet"}, name="api-export-parquet"),
    path("api/runs/<str:run_id>/records.json", views.export_records, name="api-export-records"),
]
