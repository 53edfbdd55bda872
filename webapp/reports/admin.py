from django.contrib import admin

from webapp.reports.models import Report, ReportRevision


@admin.register(Report)
class ReportAdmin(admin.ModelAdmin):
    list_display = ("id", "title", "author", "published_at", "hidden", "deleted_at")
    list_filter = ("hidden",)
    search_fields = ("title", "body")
    readonly_fields = ("parts", "body_html", "created_at", "edited_at")


@admin.register(ReportRevision)
class ReportRevisionAdmin(admin.ModelAdmin):
    list_display = ("id", "report", "editor", "written_at", "replaced_at")
