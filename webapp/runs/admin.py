from django.contrib import admin

from webapp.runs.models import Run, RunEvent


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = ("id", "name", "state", "health", "last_step", "updated_at")
    list_filter = ("state", "health", "source")
    search_fields = ("id", "name")
    readonly_fields = ("created_at", "updated_at", "last_heartbeat_at")


@admin.register(RunEvent)
class RunEventAdmin(admin.ModelAdmin):
    list_display = ("run", "kind", "name", "step", "t")
    list_filter = ("kind",)
    search_fields = ("run__id", "name")
