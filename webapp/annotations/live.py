"""Live `annotation` frames to every open dashboard of a run, sent after the write commits.

Frames carry references only — ids, a version, counts — never a title, body, author or any other text a user
wrote: every live channel keeps a buffer (the run's live log, nchan's resume window), and a post a moderator hides
or its author deletes must not be readable from any of them. The page reads the public view of the post over HTTP
(`/api/annotations/<id>/`), where moderation applies at read time (a hidden post answers 404 to the public). The
shapes are documented in docs/PROTOCOL.md; tests/web/live/test_moderation_leak.py holds every channel to it.

They leave through runs.extensions.send_frame, which live fills (annotations comes before live in the chain).
tests/web/annotations/test_live.py runs a real RunConsumer to hold both sides to it.
"""

from __future__ import annotations

from django.db import transaction

from webapp.runs import extensions

FRAME = "annotation"


def push(run_id: str, frame: dict) -> None:
    """Send `frame` to the run's viewers once the current transaction commits (never a write that rolled back)."""
    transaction.on_commit(lambda: send_now(run_id, frame))


def send_now(run_id: str, frame: dict) -> None:
    extensions.send_frame(run_id, {"type": FRAME, "run_id": run_id, **frame})


def version(record: dict) -> str:
    """A post's version: when it was last written (an edit changes it; the page refetches on a new one)."""
    return record.get("edited_at") or record.get("created_at") or ""


def upsert(run_id: str, record: dict) -> None:
    """A public annotation was created, edited or unhidden: its id, version and reply count (never its text)."""
    push(run_id, {"event": "upsert", "id": record["id"], "version": version(record),
                  "reply_count": record.get("reply_count", 0)})


def remove(run_id: str, annotation_id: int, why: str) -> None:
    push(run_id, {"event": "remove", "id": annotation_id, "reason": why})


def reply(run_id: str, record: dict, reply_count: int) -> None:
    """A public reply was written, edited or unhidden: its id and its annotation's (never its text)."""
    push(run_id, {"event": "reply", "annotation_id": record["annotation"], "id": record["id"],
                  "version": version(record), "reply_count": reply_count})


def reply_remove(run_id: str, annotation_id: int, reply_id: int, why: str, reply_count: int) -> None:
    push(run_id, {"event": "reply_remove", "annotation_id": annotation_id, "id": reply_id, "reason": why,
                  "reply_count": reply_count})


def reactions(run_id: str, target: str, pk: int, counts: dict[str, int], annotation_id: int) -> None:
    push(run_id, {"event": "reactions", "target": target, "id": pk, "annotation_id": annotation_id,
                  "reactions": counts})
