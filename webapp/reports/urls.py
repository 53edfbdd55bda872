from django.urls import path

from webapp.reports import api, embed, views

urlpatterns = [
    path("reports/", views.report_list, name="report-list"),
    path("reports/new/", views.report_new, name="report-new"),
    path("reports/<int:pk>/", views.report_detail, name="report-detail"),
    path("reports/<int:pk>/edit/", views.report_edit, name="report-edit"),
    path("reports/<int:pk>/publish/", views.report_publish, name="report-publish"),
    path("reports/<int:pk>/delete/", views.report_delete, name="report-delete"),
    path("reports/<int:pk>/moderation/", views.report_moderate, name="report-moderation"),
    path("reports/<int:pk>/history/", views.report_history, name="report-history"),
    path("embed/runs/<str:run_id>/chart/", embed.embed_chart, name="embed-chart"),
    path("oembed", embed.oembed, name="oembed"),
    path("api/reports/", api.report_list, name="api-reports"),
    path("api/reports/<int:pk>/", api.report_detail, name="api-report"),
    path("api/reports/<int:pk>/revisions/", api.report_revisions, name="api-report-revisions"),
    path("api/runs/<str:run_id>/reports/", api.run_reports, name="api-run-reports"),
]
