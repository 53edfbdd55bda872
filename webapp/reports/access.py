"""The one way views reach reports: what the viewer may read (404 otherwise) and change (403 otherwise)."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.http import Http404

from webapp.accounts.permissions import can
from webapp.reports.models import Report


def moderator(user) -> bool:
    return can(user, "report.moderate")


def visible(user):
    return Report.objects.for_viewer(user, moderator(user)).select_related("author", "hidden_by")


def get_report(user, pk: int) -> Report:
    report = visible(user).filter(pk=pk).first()
    if report is None:
        raise Http404(f"no report {pk}")
    return report


def get_own(user, pk: int) -> Report:
    """The viewer's own report that is not deleted (a moderator edits nobody else's either)."""
    report = get_report(user, pk)
    if report.author_id != user.pk:
        raise PermissionDenied("you may only change your own reports")
    if report.deleted_at is not None:
        raise Http404(f"report {pk} is deleted")
    return report
