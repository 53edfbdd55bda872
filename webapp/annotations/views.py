"""An annotation's thread as HTML, as this viewer may see it and act on it (/annotations/<id>/thread/): the
annotations panel (static/js/annotation-thread.js) puts it in place when a thread opens and whenever a frame says
it changed (Obs.refreshFragment: ETag, 304 while nothing did). Bodies are the sanitised HTML stored on write
(webapp/annotations/markdown.py); all else is auto-escaped text. What the viewer may not read is a 404."""

from __future__ import annotations

import datetime as dt

from django.http import Http404
from django.views.decorators.http import require_GET

from webapp.accounts.permissions import public
from webapp.annotations.access import Viewer, annotation_record, get_post, my_reactions, reply_records
from webapp.annotations.models import REACTIONS
from webapp.api import ApiError
from webapp.fragments import fragment


def _when(iso: str | None) -> str:
    return dt.datetime.fromisoformat(iso).astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC") if iso else ""


def _post(viewer: Viewer, me, target: str, p: dict, mine_kinds: list) -> dict:
    """A post's view: what the page writes, and which of its buttons this viewer gets."""
    gone = bool(p.get("hidden") or p.get("deleted"))
    can_react = viewer.react and not gone  # the server refuses reactions to hidden posts
    reactions = [{"kind": kind, "label": label, "n": p["reactions"].get(kind, 0), "on": kind in mine_kinds,
                  "enabled": can_react} for kind, label in REACTIONS.items()
                 if can_react or p["reactions"].get(kind, 0)]
    own = me is not None and p["author"] is not None and p["author"]["id"] == me
    return {**p, "target": target, "gone": gone, "when": _when(p["created_at"]), "reaction_bar": reactions,
            "can_edit": own and not p.get("deleted") and viewer.edit_own,
            "can_moderate": viewer.moderate and not p.get("deleted"),
            "can_quote": target == "annotation" and not gone}


def _steps(a: dict) -> str:
    return f"steps {a['step_start']}–{a['step_end']}" if a["step_end"] > a["step_start"] else f"step {a['step_start']}"


@public
@require_GET
def thread(request, pk: int):
    viewer = Viewer.of(request)
    try:
        a = get_post(viewer, "annotation", pk)
    except ApiError:
        raise Http404(f"no annotation {pk}") from None
    replies = list(viewer.replies().filter(annotation=a).select_related("author__profile", "hidden_by__profile"))
    mine = my_reactions(viewer, a, [r.id for r in replies])
    me = viewer.as_json()["id"]
    record = annotation_record(a, viewer.moderate)
    where = f"{_steps(record)} · {record['metric'] or 'every chart'}" + \
        (f" · anomaly {record['anomaly']}" if record["anomaly"] else "")
    return fragment(request, "annotations/_thread.html", {
        "a": _post(viewer, me, "annotation", record, mine["annotation"]), "where": where,
        "replies": [_post(viewer, me, "reply", r, mine["replies"].get(r["id"], []))
                    for r in reply_records(replies, viewer.moderate)],
        "can_reply": viewer.create and a.public})
