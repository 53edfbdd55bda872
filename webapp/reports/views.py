"""Report pages: the list of published reports, one report, its history, and the member's editor (form posts)."""

from __future__ import annotations

from django.db import transaction
from django.http import HttpResponseRedirect
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_ratelimit.decorators import ratelimit

from webapp.accounts.permissions import can, public, requires
from webapp.annotations import validation as ann_validation
from webapp.api import ApiError
from webapp.live.relay import add_page_data as live_page_data
from webapp.reports import blocks, display, previews
from webapp.reports.access import get_own, get_report, moderator
from webapp.reports.models import Report, ReportRevision

MAX_TITLE = 200
MAX_BODY = 50_000  # Markdown characters of a report
MAX_REASON = 500
LIST_LIMIT = 200
POST_RATE = "10/m"  # new reports per user
EDIT_RATE = "30/m"  # edits, publishes and deletes per user


@public
@require_GET
def report_list(request):
    reports = list(Report.objects.listed().select_related("author").prefetch_related("runs")[:LIST_LIMIT])
    mine = []
    if request.user.is_authenticated:
        mine = list(Report.objects.filter(author=request.user, deleted_at__isnull=True, published_at__isnull=True)
                    .order_by("-id")[:50])
    return render(request, "reports/list.html", {"reports": reports, "drafts": mine,
                                                 "can_create": can(request.user, "report.create")})


def page_data(request, shown: list[dict]) -> dict:
    """What minichart.js starts from: the chart specs, and the live tier's subscription details (webapp.live)."""
    charts = display.charts(shown)
    page = {"charts": charts, "last_events": display.live_start(charts)}
    live_page_data(request, None, page)
    return page


@public
@require_GET
def report_detail(request, pk: int):
    report = get_report(request.user, pk)
    shown = display.blocks(report.parts)
    runs = sorted(report.runs.all(), key=lambda r: r.id)
    return render(request, "reports/detail.html", {
        "report": report, "parts": shown, "page": page_data(request, shown),
        "mine": report.author_id is not None and report.author_id == request.user.pk,
        "moderate": moderator(request.user), "cited": [r.id for r in runs],
        "preview_meta": previews.meta(request, report, runs),
    })


@public
@require_GET
def report_history(request, pk: int):
    report = get_report(request.user, pk)
    return render(request, "reports/history.html", {"report": report, "revisions": report.revisions.order_by("-id")})


def _fields(request) -> tuple[str, str, list[dict]]:
    """The form's title and body, cleaned and checked, and the body's parts; ApiError 400 naming what is wrong."""
    data = {"title": request.POST.get("title", ""), "body": request.POST.get("body", "")}
    title = " ".join(ann_validation.text(data, "title", MAX_TITLE, True).split())
    body = ann_validation.text(data, "body", MAX_BODY, False)
    return title, body, blocks.parse(body)


def _save(report: Report, title: str, body: str, parts: list[dict], publish: bool) -> None:
    report.title, report.body, report.parts = title, body, parts
    report.body_html = "".join(p["html"] for p in parts if p["kind"] == "markdown")
    if publish and report.published_at is None:
        report.published_at = timezone.now()
    with transaction.atomic():
        report.save()
        report.runs.set(blocks.cited_runs(parts))


def _editor(request, report, error=None, status=200):
    return render(request, "reports/edit.html", {
        "report": report, "error": error, "blocks": blocks.KEYS,
        "title": request.POST.get("title", report.title if report else ""),
        "body": request.POST.get("body", report.body if report else ""),
    }, status=status)


def _submit(request, report: Report | None):
    """The editor of a new (None) or one's own report: the form on GET; on POST the form checked (shown again with
    the error, 400) and saved, keeping a revision when an edit changed the title or body; then the report's page."""
    if request.method != "POST":
        return _editor(request, report)
    try:
        title, body, parts = _fields(request)
    except ApiError as e:
        return _editor(request, report, e.message, 400)
    if report is None:
        report = Report(author=request.user)
    elif (title, body) != (report.title, report.body):
        ReportRevision.of(report, request.user).save()
        report.edited_at = timezone.now()
    _save(report, title, body, parts, publish=request.POST.get("action") == "publish")
    return HttpResponseRedirect(f"/reports/{report.id}/")


@requires("report.create")
@require_http_methods(["GET", "HEAD", "POST"])
@ratelimit(key="user_or_ip", rate=POST_RATE, method="POST", block=True, group="reports.post")
def report_new(request):
    return _submit(request, None)


def _edits_own(methods: list[str]):
    """A view that changes one's own report: report.edit_own, these methods only, the edit rate limit on POSTs."""
    def wrap(view):
        limited = ratelimit(key="user_or_ip", rate=EDIT_RATE, method="POST", block=True, group="reports.edit")(view)
        return requires("report.edit_own")(require_http_methods(methods)(limited))
    return wrap


@_edits_own(["GET", "HEAD", "POST"])
def report_edit(request, pk: int):
    return _submit(request, get_own(request.user, pk))


@_edits_own(["POST"])
def report_publish(request, pk: int):
    report = get_own(request.user, pk)
    if report.published_at is None:
        report.published_at = timezone.now()
        report.save(update_fields=["published_at"])
    return HttpResponseRedirect(f"/reports/{report.id}/")


@_edits_own(["POST"])
def report_delete(request, pk: int):
    report = get_own(request.user, pk)
    report.deleted_at = timezone.now()
    report.save(update_fields=["deleted_at"])
    return HttpResponseRedirect("/reports/")


@requires("report.moderate")
@require_POST
def report_moderate(request, pk: int):
    """Hide (gone for the public, kept and marked for moderators and its author) or restore, with a reason."""
    report = get_report(request.user, pk)
    action = request.POST.get("action")
    reason = " ".join(request.POST.get("reason", "").split())[:MAX_REASON]
    if action not in ("hide", "restore") or not reason:
        return render(request, "reports/error.html", {"message": "choose hide or restore and give a reason"},
                      status=400)
    (report.hide if action == "hide" else report.unhide)(request.user, reason)
    report.save(update_fields=["hidden", "hidden_by", "hidden_reason", "hidden_at"])
    return HttpResponseRedirect(f"/reports/{report.id}/")
