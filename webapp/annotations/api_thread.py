"""JSON API inside a thread: replies (members), edit/delete one's own reply, reactions (members), moderation
(moderators and operators: hide/unhide an annotation or a reply, with a reason).

    GET  /api/annotations/<aid>/replies/           POST {body}
    PATCH / DELETE /api/replies/<rid>/             edit {body} / soft delete, own only
    GET  /api/replies/<rid>/revisions/
    POST /api/annotations/<aid>/reactions/         POST /api/replies/<rid>/reactions/      {kind, on?}
    POST /api/annotations/<aid>/moderation/        POST /api/replies/<rid>/moderation/     {action, reason}
"""

from __future__ import annotations

from django.db import IntegrityError, transaction
from django.http import JsonResponse
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST
from django_ratelimit.decorators import ratelimit

from webapp.accounts.permissions import api_requires, public
from webapp.annotations import live, validation
from webapp.annotations.access import (Viewer, annotation_record, get_post, json_errors, own, reply_records,
                                       require_public, write)
from webapp.annotations.api import EDIT_RATE, POST_RATE
from webapp.annotations.models import Reaction, Reply, Revision, reaction_counts
from webapp.api import ApiError

REACT_RATE = "60/m"
MODERATE_RATE = "120/m"


def _reply_count(annotation_id: int) -> int:
    return Reply.objects.public().filter(annotation_id=annotation_id).count()


@public
@require_http_methods(["GET", "HEAD", "POST"])
@json_errors
def replies(request, pk: int):
    if request.method == "POST":
        return _reply(request, pk)
    viewer = Viewer.of(request)
    a = get_post(viewer, "annotation", pk)
    items = list(viewer.replies().filter(annotation=a).select_related("author__profile", "hidden_by__profile"))
    return JsonResponse({"annotation": a.id, "replies": reply_records(items, viewer.moderate)})


@write("annotation.create", POST_RATE, "annotations.post", method="POST")
def _reply(request, pk: int):
    a = get_post(Viewer.of(request), "annotation", pk)
    require_public(a)
    body = validation.text(validation.json_body(request), "body", validation.MAX_REPLY, required=True)
    r = Reply.objects.create(annotation=a, author=request.user, body=body, body_html=validation.render(body))
    record = reply_records([r], False)[0]
    live.reply(a.run_id, record, _reply_count(a.id))
    return JsonResponse(record, status=201)


@api_requires("annotation.edit_own")
@require_http_methods(["PATCH", "DELETE"])
@ratelimit(key="user_or_ip", rate=EDIT_RATE, block=True, group="annotations.edit")
@json_errors
def reply_detail(request, pk: int):
    viewer = Viewer.of(request)
    r = get_post(viewer, "reply", pk)
    own(viewer, r)
    run_id = r.annotation.run_id
    if request.method == "DELETE":
        r.deleted_at = timezone.now()
        r.save(update_fields=["deleted_at"])
        live.reply_remove(run_id, r.annotation_id, r.id, "deleted", _reply_count(r.annotation_id))
        return JsonResponse({"id": r.id, "deleted": True})
    data = validation.json_body(request)
    if set(data) - {"body"}:
        raise ApiError(400, "only body can be edited")
    body = validation.text(data, "body", validation.MAX_REPLY, required=True)
    if body != r.body:
        Revision.of(r, request.user).save()
        r.body, r.body_html, r.edited_at = body, validation.render(body), timezone.now()
        r.save()
    record = reply_records([r], viewer.moderate)[0]
    if r.public and r.annotation.public:
        live.reply(run_id, reply_records([r], False)[0], _reply_count(r.annotation_id))
    return JsonResponse(record)


@write("annotation.react", REACT_RATE, "annotations.react", method="POST")
@require_POST
@json_errors
def react(request, target: str, pk: int):
    """{"kind": "+1", "on": true|false} -> {"reactions": {kind: count}, "mine": [kind]}; idempotent either way."""
    post = get_post(Viewer.of(request), target, pk)
    require_public(post)
    kind, on = validation.reaction(validation.json_body(request))
    mine = Reaction.objects.filter(**{target: post}, user=request.user)
    if on:
        try:
            with transaction.atomic():  # the unique constraint decides a race between two tabs
                Reaction.objects.get_or_create(**{target: post}, user=request.user, kind=kind)
        except IntegrityError:
            pass
    else:
        mine.filter(kind=kind).delete()
    counts = reaction_counts(target, [post.id]).get(post.id, {})
    annotation_id = post.id if target == "annotation" else post.annotation_id
    run_id = post.run_id if target == "annotation" else post.annotation.run_id
    live.reactions(run_id, target, post.id, counts, annotation_id)
    return JsonResponse({"reactions": counts, "mine": sorted(mine.values_list("kind", flat=True))})


@write("annotation.moderate", MODERATE_RATE, "annotations.moderate", method="POST")
@require_POST
@json_errors
def moderate(request, target: str, pk: int):
    """{"action": "hide" | "unhide", "reason": "why"} -> the record as moderators see it."""
    post = get_post(Viewer.of(request), target, pk)
    if post.deleted_at is not None:
        raise ApiError(409, "this post is deleted")
    data = validation.json_body(request)
    action = data.get("action")
    if action not in ("hide", "unhide"):
        raise ApiError(400, "action must be hide or unhide", field="action")
    why = validation.reason(data)
    (post.hide if action == "hide" else post.unhide)(request.user, why)
    post.save(update_fields=["hidden", "hidden_by", "hidden_reason", "hidden_at"])
    if target == "annotation":
        if action == "hide":
            live.remove(post.run_id, post.id, "hidden")
        else:
            live.upsert(post.run_id, annotation_record(post))
        return JsonResponse(annotation_record(post, moderator_view=True))
    run_id, count = post.annotation.run_id, _reply_count(post.annotation_id)
    if action == "hide":
        live.reply_remove(run_id, post.annotation_id, post.id, "hidden", count)
    elif post.annotation.public:
        live.reply(run_id, reply_records([post], False)[0], count)
    return JsonResponse(reply_records([post], moderator_view=True)[0])
