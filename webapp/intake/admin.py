from django.contrib import admin

from webapp.intake.models import RunClaim


@admin.register(RunClaim)
class RunClaimAdmin(admin.ModelAdmin):
    """Staff can hand a run to another user, or free its id, by editing or deleting its claim."""
    list_display = ("run_id", "kind", "user", "created_at")
    list_filter = ("kind",)
    search_fields = ("run_id", "user__username")
