"""Roles are Django groups with these exact names; staff superusers count as operators."""

from __future__ import annotations

from django.contrib.auth.models import Group

ANONYMOUS = "anonymous"
MEMBER, MODERATOR, OPERATOR = "member", "moderator", "operator"
ROLES = (MEMBER, MODERATOR, OPERATOR)
PERSONAS = (ANONYMOUS, *ROLES)  # every row of the authorization matrix


def roles_of(user) -> frozenset[str]:
    """The roles a user holds (empty for anonymous). Cached on the user object for the request."""
    if user is None or not user.is_authenticated or not user.is_active:
        return frozenset()
    cached = getattr(user, "_obs_roles", None)
    if cached is None:
        names = set(user.groups.filter(name__in=ROLES).values_list("name", flat=True))
        if user.is_superuser:
            names.add(OPERATOR)
        cached = user._obs_roles = frozenset(names)
    return cached


def grant(user, role: str) -> None:
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r} (roles: {', '.join(ROLES)})")
    group, _ = Group.objects.get_or_create(name=role)
    user.groups.add(group)
    user.__dict__.pop("_obs_roles", None)


def revoke(user, role: str) -> None:
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r} (roles: {', '.join(ROLES)})")
    user.groups.remove(*Group.objects.filter(name=role))
    user.__dict__.pop("_obs_roles", None)
