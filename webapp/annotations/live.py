"""Live `annotation` frames to every open dashboard of a run, sent after the write commits.

Frames carry only what the public may read (a hidden post leaves as a "remove"; moderators' pages keep what they
already hold, marked). The shapes are documented in webapp/live/protocol.py.

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


def upsert(run_id: str, record: dict) -> None:
    push(run_id, {"event": "upsert", "annotation": record})


def remove(run_id: str, annotation_id: int, why: str) -> None:
    push(run_id, {"event": "remove", "id": annotation_id, "reason": why})


def reply(run_id: str, record: dict, reply_count: int) -> None:
    push(run_id, {"event": "reply", "annotation_id": record["annotation"], "reply": record,
                  "reply_count": reply_count})


def reply_remove(run_id: str, annotation_id: int, reply_id: int, why: str, reply_count: int) -> None:
    push(run_id, {"event": "reply_remove", "annotation_id": annotation_id, "id": reply_id, "reason": why,
                  "reply_count": reply_count})


def reactions(run_id: str, target: str, pk: int, counts: dict[str, int], annotation_id: int) -> None:
    push(run_id, {"event": "reactions", "target": target, "id": pk, "annotation_id": annotation_id,
                  "reactions": counts})
