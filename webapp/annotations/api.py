"""JSON API for a run's annotations: list (public; step window, tag, Grafana export), create (members), and one
annotation's thread (public), edit and soft delete (its author), with edit history.

    GET  /api/runs/<id>/annotations/?start=&end=&tag=&format=grafana
    POST /api/runs/<id>/annotations/          {title, body, tags, metric?, step_start, step_end?, anomaly?}
    GET  /api/annotations/<aid>/              the thread: annotation, replies, the viewer's reactions
    PATCH / DELETE /api/annotations/<aid>/    edit {title?, body?, tags?} / soft delete, own only
    GET  /api/annotations/<aid>/revisions/    what edits replaced, oldest first
"""

from __future__ import annotations

from django.http import JsonResponse
from django.utils import timezone
from django.views.decorators.http import require_http_methods

from webapp.accounts.permissions import public
from webapp.annotations import grafana, live, validation
from webapp.annotations.access import (Viewer, annotation_record, annotation_records, get_post, json_errors,
                                       my_reactions, own, reply_records, viewer_and_post, write)
from webapp.annotations.models import REACTIONS, TAGS, Annotation, Revision
from webapp.api import ApiError, int_param
from webapp.pagination import page
from webapp.runs.api import get_run

LIST_LIMIT = 2000  # annotations per answer, in step order; narrow the window with start/end for more
POST_RATE = "10/m"  # new annotations and replies per user (or address), shared
EDIT_RATE = "30/m"  # edits and deletes per user


@public
@require_http_methods(["GET", "HEAD", "POST"])
@json_errors
def run_annotations(request, run_id: str):
    run = get_run(run_id)
    if request.method == "POST":
        return _create(request, run)
    viewer = Viewer.of(request)
    qs = viewer.annotations().filter(run=run).select_related("author__profile", "hidden_by__profile")
    start = int_param(request, "start", None, lo=0)
    end = int_param(request, "end", None, lo=0)
    if end is not None:
        qs = qs.filter(step_start__lte=end)
    if start is not None:
        qs = qs.filter(step_end__gte=start)
    tag = request.GET.get("tag")
    if tag is not None and tag not in TAGS:
        raise ApiError(400, f"unknown tag; choose from {', '.join(TAGS)}", parameter="tag")
    fmt = request.GET.get("format", "json")
    if fmt not in ("json", "grafana"):
        raise ApiError(400, "format must be json or grafana", parameter="format")
    rows, nxt = page(request, qs, ["step_start", "id"], LIST_LIMIT, LIST_LIMIT)
    items = [a for a in rows if tag is None or tag in a.tags]
    if fmt == "grafana":
        return JsonResponse(grafana.export([a for a in items if a.public], request), safe=False)
    return JsonResponse({"run": run.id, "annotations": annotation_records(items, viewer.moderate),
                         "truncated": nxt is not None, "next": nxt, "viewer": viewer.as_json(), "tags": list(TAGS),
                         "reactions": REACTIONS, "limits": validation.LIMITS})


@write("annotation.create", POST_RATE, "annotations.post", method="POST")
def _create(request, run):
    data = validation.json_body(request)
    step_start, step_end = validation.step_range(run, data)
    body = validation.text(data, "body", validation.MAX_BODY, required=False)
    a = Annotation(run=run, author=request.user, title=validation.title(data), body=body,
                   body_html=validation.render(body), tags=validation.tags(data), metric=validation.metric(run, data),
                   step_start=step_start, step_end=step_end)
    linked = validation.anomaly(run, data)
    if linked is not None:
        a.anomaly = linked
    a.save()
    record = annotation_record(a)
    live.upsert(run.id, record)
    return JsonResponse(record, status=201)


@public
@require_http_methods(["GET", "HEAD", "PATCH", "DELETE"])
@json_errors
def annotation_detail(request, pk: int):
    if request.method == "PATCH":
        return _edit(request, pk)
    if request.method == "DELETE":
        return _delete(request, pk)
    viewer = Viewer.of(request)
    a = get_post(viewer, "annotation", pk)
    replies = list(viewer.replies().filter(annotation=a).select_related("author__profile", "hidden_by__profile"))
    return JsonResponse({"annotation": annotation_record(a, viewer.moderate),
                         "replies": reply_records(replies, viewer.moderate),
                         "mine": my_reactions(viewer, a, [r.id for r in replies]), "viewer": viewer.as_json()})


@write("annotation.edit_own", EDIT_RATE, "annotations.edit")
def _edit(request, pk: int):
    viewer, a = viewer_and_post(request, "annotation", pk)
    own(viewer, a)
    data = validation.json_body(request)
    unknown = set(data) - set(validation.EDITABLE)
    if unknown:
        raise ApiError(400, f"only {', '.join(validation.EDITABLE)} can be edited (not {sorted(unknown)})")
    changes = {}
    if "title" in data:
        changes["title"] = validation.title(data)
    if "body" in data:
        changes["body"] = validation.text(data, "body", validation.MAX_BODY, required=False)
    if "tags" in data:
        changes["tags"] = validation.tags(data)
    if any(getattr(a, k) != v for k, v in changes.items()):
        Revision.of(a, request.user).save()
        for k, v in changes.items():
            setattr(a, k, v)
        if "body" in changes:
            a.body_html = validation.render(a.body)
        a.edited_at = timezone.now()
        a.save()
    record = annotation_record(a, viewer.moderate)
    if a.public:
        live.upsert(a.run_id, record)
    return JsonResponse(record)


@write("annotation.edit_own", EDIT_RATE, "annotations.edit")
def _delete(request, pk: int):
    viewer, a = viewer_and_post(request, "annotation", pk)
    own(viewer, a)
    a.deleted_at = timezone.now()
    a.save(update_fields=["deleted_at"])
    live.remove(a.run_id, a.id, "deleted")
    return JsonResponse({"id": a.id, "deleted": True})


@public
@require_http_methods(["GET", "HEAD"])
@json_errors
def revisions(request, target: str, pk: int):
    """An annotation's or a reply's edit history (what the viewer may read of it), oldest first."""
    post = get_post(Viewer.of(request), target, pk)
    return JsonResponse({target: post.id, "revisions": [r.as_json() for r in post.revisions.order_by("id")]})
