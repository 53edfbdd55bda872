"""One intake request: its body read into validated stream entries (all or none), then written in one go."""

from __future__ import annotations

import json
import logging

import redis

from observatory import contract
from observatory.streams import add_telemetry
from observatory.streams.trim import maybe_trim
from webapp.api import ApiError, malformed_text

log = logging.getLogger("observatory.intake")


def read_entries(request, run_id: str) -> list[dict[str, str]]:
    """The request's messages as encoded stream entries; ApiError (400, 413) names the first bad one."""
    length = int(request.META.get("CONTENT_LENGTH") or 0)
    if length > contract.INTAKE_MAX_BYTES:
        raise ApiError(413, f"body of {length} bytes is over the limit of {contract.INTAKE_MAX_BYTES}: send fewer "
                            "messages per request")
    body = request.body
    if len(body) > contract.INTAKE_MAX_BYTES:
        raise ApiError(413, f"body over the limit of {contract.INTAKE_MAX_BYTES} bytes")
    try:
        obj = json.loads(body)
    except (ValueError, RecursionError):
        raise ApiError(400, "body is not JSON", reason="bad_json") from None
    bad = malformed_text(obj)
    if bad is not None:
        raise ApiError(400, f"{bad[:200]} is not well-formed text (a lone UTF-16 surrogate)", field=bad[:200],
                       reason="bad_text")
    messages = obj.get("messages") if isinstance(obj, dict) else None
    if not isinstance(messages, list):
        raise ApiError(400, 'body must be {"messages": [{"kind": ..., "data": {...}}, ...]}', reason="bad_body")
    if len(messages) > contract.INTAKE_MAX_MESSAGES:
        raise ApiError(413, f"{len(messages)} messages: at most {contract.INTAKE_MAX_MESSAGES} per request")
    entries = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("kind"), str) or not isinstance(m.get("data"), dict):
            raise ApiError(400, f'message {i}: must be {{"kind": <kind>, "data": {{...}}}}', index=i,
                           reason="bad_message")
        try:
            entries.append(contract.encode(run_id, m["kind"], m["data"]))
        except contract.ContractError as e:
            raise ApiError(400, f"message {i}: {e}", index=i, reason=e.reason) from None
        except (TypeError, ValueError, RecursionError) as e:
            raise ApiError(400, f"message {i}: {e}"[:300], index=i, reason="bad_json") from None
    return entries


def write_entries(client, run_id: str, entries: list[dict[str, str]]) -> None:
    """All entries onto the run's stream in one MULTI/EXEC, the way a Redis producer writes them; then the stream's
    caps, when no producer of the run applied them within contract.TRIM_EVERY_S."""
    pipe = client.pipeline(transaction=True)
    add_telemetry(pipe, run_id, entries)
    pipe.execute()
    try:
        maybe_trim(client, run_id)
    except redis.RedisError as e:  # the entries are written: a later request applies the caps
        log.warning("run %s: stream cap check failed: %s", run_id, e)
