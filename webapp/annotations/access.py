"""The one way views reach annotations and replies: what the viewer may see and do, 404 for what they may not
see, 403 for someone else's post, 409 for a post that is hidden or deleted."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from django.db.models import Count, Q
from django.http import JsonResponse

from django_ratelimit.decorators import ratelimit

from webapp.accounts.permissions import api_requires, can
from webapp.annotations.models import Annotation, Reaction, Reply, author_json, reaction_counts
from webapp.api import ApiError, found


@dataclass(frozen=True)
class Viewer:
    user: object
    create: bool
    edit_own: bool
    react: bool
    moderate: bool

    @classmethod
    def of(cls, request) -> "Viewer":
        u = request.user
        return cls(u, can(u, "annotation.create"), can(u, "annotation.edit_own"), can(u, "annotation.react"),
                   can(u, "annotation.moderate"))

    def as_json(self) -> dict:
        who = author_json(self.user) if self.user.is_authenticated else None
        return {"id": who and who["id"], "name": who and who["name"],
                "can": {"create": self.create, "edit_own": self.edit_own, "react": self.react,
                        "moderate": self.moderate}}

    def annotations(self):
        return Annotation.objects.for_viewer(self.user, self.moderate)

    def replies(self):
        return Reply.objects.for_viewer(self.user, self.moderate).filter(annotation__in=self.annotations())


def json_errors(view):
    """ApiError -> {"error": ...} with its status, for views of any method."""
    @functools.wraps(view)
    def wrapper(request, *args, **kwargs):
        try:
            return view(request, *args, **kwargs)
        except ApiError as e:
            return JsonResponse({"error": e.message, **e.extra}, status=e.status)
    return wrapper


def write(action: str, rate: str, group: str, **limit):
    """A write of the annotations API: the permission matrix's `action` (api_requires), then at most `rate` per
    member or address in the rate-limit `group` (429 beyond); `limit`: more django-ratelimit arguments (method)."""
    def wrap(view):
        return api_requires(action)(ratelimit(key="user_or_ip", rate=rate, block=True, group=group, **limit)(view))
    return wrap


def viewer_and_post(request, target: str, pk: int):
    """The request's Viewer and the annotation or reply `pk` they may read (get_post: else ApiError 404)."""
    viewer = Viewer.of(request)
    return viewer, get_post(viewer, target, pk)


def get_post(viewer: Viewer, target: str, pk: int):
    """The annotation or reply `pk` if the viewer may read it, else ApiError 404."""
    qs = viewer.annotations() if target == "annotation" else viewer.replies().select_related("annotation")
    return found(qs.select_related("author__profile", "hidden_by__profile").filter(pk=pk).first(), f"no {target} {pk}")


def own(viewer: Viewer, post) -> None:
    if post.author_id is None or post.author_id != viewer.user.pk:
        raise ApiError(403, "you may only change your own posts")
    if post.deleted_at is not None:
        raise ApiError(409, "this post is deleted")


def require_public(post) -> None:
    if not post.public:
        raise ApiError(409, "this post is hidden or deleted")


# ---------------------------------------------------------------------------------------------- records
def annotation_records(items: list[Annotation], moderator_view: bool) -> list[dict]:
    """Records with their public reply counts and reaction counts (two queries for the whole list)."""
    ids = [a.id for a in items]
    counts = dict(Reply.objects.public().filter(annotation_id__in=ids).values("annotation_id")
                  .annotate(n=Count("id")).values_list("annotation_id", "n"))
    reactions = reaction_counts("annotation", ids)
    return [a.as_json(counts.get(a.id, 0), reactions.get(a.id, {}), moderator_view) for a in items]


def annotation_record(a: Annotation, moderator_view: bool = False) -> dict:
    return annotation_records([a], moderator_view)[0]


def reply_records(items: list[Reply], moderator_view: bool) -> list[dict]:
    reactions = reaction_counts("reply", [r.id for r in items])
    return [r.as_json(reactions.get(r.id, {}), moderator_view) for r in items]


def my_reactions(viewer: Viewer, annotation: Annotation, reply_ids) -> dict:
    """The kinds the viewer has given: {"annotation": [kind], "replies": {reply id: [kind]}}."""
    out: dict = {"annotation": [], "replies": {}}
    if not viewer.user.is_authenticated:
        return out
    rows = Reaction.objects.filter(Q(annotation=annotation) | Q(reply_id__in=list(reply_ids)), user=viewer.user)
    for reply_id, kind in rows.values_list("reply_id", "kind"):
        if reply_id is None:
            out["annotation"].append(kind)
        else:
            out["replies"].setdefault(reply_id, []).append(kind)
    return out
