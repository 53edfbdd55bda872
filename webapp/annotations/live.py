"""Live `annotation` frames to every open dashboard of a run, sent after the write commits.

Frames carry only what the public may read (a hidden post leaves as a "remove"; moderators' pages keep what they
already hold, marked). The shapes are documented in webapp/live/protocol.py.

Annotations comes before live in the web chain, so it cannot call live's push helpers; it sends the one group
message live's RunConsumer relays (`live.update` to contract.live_group(run)), whose payload's own "type" names
the frame, as ingest's feature hooks do through LivePublisher.send. tests/web/annotations/test_live.py runs a real
RunConsumer to hold both sides to it.
"""

from __future__ import annotations

import json
import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import transaction

from observatory import contract
from observatory.streams import nchan

log = logging.getLogger("observatory.annotations")
FRAME = "annotation"
GROUP_MESSAGE = "live.update"  # RunConsumer.live_update: relays the payload as the frame


def push(run_id: str, frame: dict) -> None:
    """Send `frame` to the run's viewers once the current transaction commits (never a write that rolled back)."""
    transaction.on_commit(lambda: send_now(run_id, frame))


def send_now(run_id: str, frame: dict) -> None:
    payload = {"type": FRAME, "run_id": run_id, **frame}
    if settings.OBS_LIVE_PUSH_URL:  # the push tier's public channel (webapp.live.push.to_push_tier does the same)
        try:
            nchan.shared(settings.OBS_LIVE_PUSH_URL).publish_all(run_id, json.dumps(payload, separators=(",", ":")))
        except nchan.PushError as e:
            log.warning("annotation push to the push tier for %s failed: %s", run_id, e)
    layer = get_channel_layer()
    if layer is None:
        return
    message = {"type": GROUP_MESSAGE, "run_id": run_id, "payload": payload}
    try:
        async_to_sync(layer.group_send)(contract.live_group(run_id), message)
    except Exception as e:  # the write stands; viewers see it on their next load
        log.warning("annotation push to %s failed: %s", run_id, e)


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
