from django.contrib import admin

from webapp.control.models import OperatorCommand


@admin.register(OperatorCommand)
class OperatorCommandAdmin(admin.ModelAdmin):
    list_display = ("created_at", "run", "name", "user", "status", "detail")
    list_filter = ("status", "name")
    readonly_fields = [f.name for f in OperatorCommand._meta.fields]
