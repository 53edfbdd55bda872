"""Roles are managed in the admin as group memberships; the profile sits inline on the user; tokens can be revoked."""

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin

from webapp.accounts.models import Profile, WriteToken


class ProfileInline(admin.StackedInline):
    model = Profile
    can_delete = False
    fields = ("display_name", "show_name_publicly", "email_confirmed_at")


class ObservatoryUserAdmin(UserAdmin):
    inlines = (ProfileInline,)
    list_display = ("username", "email", "is_active", "roles", "date_joined")
    list_filter = ("is_active", "is_staff", "groups")

    @admin.display(description="roles")
    def roles(self, user):
        return ", ".join(sorted(g.name for g in user.groups.all()))


User = get_user_model()
admin.site.unregister(User)
admin.site.register(User, ObservatoryUserAdmin)


@admin.register(WriteToken)
class WriteTokenAdmin(admin.ModelAdmin):
    """Staff can see and revoke tokens; only their owners make them (the secret exists once, on their page)."""
    list_display = ("label", "user", "hint", "created_at", "last_used_at", "revoked_at")
    list_filter = ("revoked_at",)
    readonly_fields = ("user", "secret_hash", "hint", "scope", "created_at", "last_used_at")
    actions = ("revoke",)

    def has_add_permission(self, request):
        return False

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request, queryset):
        for token in queryset:
            token.revoke()
