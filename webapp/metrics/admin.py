from django.contrib import admin

from webapp.metrics.models import Series


@admin.register(Series)
class SeriesAdmin(admin.ModelAdmin):
    list_display = ("run", "name", "count", "first_step", "last_step")
    search_fields = ("run__id", "name")
    readonly_fields = ("count", "first_step", "last_step")
