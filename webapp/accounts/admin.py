"""Roles are managed in the admin as group memberships; the profile sits inline on the user."""

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin

from webapp.accounts.models import Profile


class ProfileInline(admin.StackedInline):
    model = Profile
    can_delete = False
    fields = ("display_name", "email_confirmed_at")


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
