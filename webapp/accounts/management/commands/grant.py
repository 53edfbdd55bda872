"""`manage.py grant <username> <role>`: give (or with --revoke, take away) a role."""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from webapp.accounts import roles


class Command(BaseCommand):
    help = "Grant a role (member, moderator, operator) to a user; --revoke takes it away."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("role", choices=roles.ROLES)
        parser.add_argument("--revoke", action="store_true")

    def handle(self, username, role, revoke=False, **options):
        try:
            user = get_user_model().objects.get(username=username)
        except get_user_model().DoesNotExist:
            raise CommandError(f"no user named {username!r}") from None
        (roles.revoke if revoke else roles.grant)(user, role)
        held = ", ".join(sorted(roles.roles_of(user))) or "none"
        self.stdout.write(f"{username}: {'revoked' if revoke else 'granted'} {role}; roles now: {held}")
