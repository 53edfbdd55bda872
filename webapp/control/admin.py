"""The command audit trail in the Django admin: searchable and filterable, read-only (an audit trail is not edited)."""

from django.contrib import admin

from webapp.control.models import OperatorCommand


@admin.register(OperatorCommand)
class OperatorCommandAdmin(admin.ModelAdmin):
    list_display = ("created_at", "run", "name", "operator", "source", "status", "undone", "short_reason", "step")
    list_filter = ("status", "name", "source", ("undone_at", admin.EmptyFieldListFilter), "created_at")
    search_fields = ("id", "run__id", "run__name", "reason", "detail", "user__username", "sender")
    date_hierarchy = "created_at"
    list_select_related = ("run", "user")
    readonly_fields = [f.name for f in OperatorCommand._meta.fields]

    @admin.display(description="operator")
    def operator(self, cmd):
        return cmd.user.get_username() if cmd.user else (cmd.sender or "–")

    @admin.display(description="undone", boolean=True)
    def undone(self, cmd):
        return cmd.undone_at is not None

    @admin.display(description="reason")
    def short_reason(self, cmd):
        return cmd.reason if len(cmd.reason) <= 80 else cmd.reason[:79] + "…"

    def has_add_permission(self, request):
        return False  # commands are sent from the panel, the API or the CLI, which sign them

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
