"""The HTTP intake: how a training loop without Redis access posts telemetry to the site.

    POST /api/runs/<run id>/telemetry/
    Authorization: Bearer <write token>
    {"messages": [{"kind": <one of KINDS>, "data": {...}}, ...]}     at most INTAKE_MAX_MESSAGES, INTAKE_MAX_BYTES

Each message is validated exactly like a stream entry (`encode(run, kind, data)`); the site writes a request
all or nothing onto the run's telemetry stream, as a Redis producer would. Answers: 202 {"accepted": n};
400 {"error", "index", "reason"} for a message that breaks the contract; 401 no, unknown or revoked token;
403 a token not scoped to this run (or its owner may not publish); 413 too many messages or bytes; 429 too
many requests; 503 the site cannot reach Redis (retry).
"""

from __future__ import annotations

from typing import Iterable, Mapping

__all__ = ["INTAKE_MAX_MESSAGES", "INTAKE_MAX_BYTES", "INTAKE_TOKEN_PREFIX", "intake_path", "intake_body"]

INTAKE_MAX_MESSAGES = 1000
INTAKE_MAX_BYTES = 1024 * 1024
INTAKE_TOKEN_PREFIX = "obs_"  # write tokens start with this, so a leaked one is recognisable in a scan


def intake_path(run_id: str) -> str:
    return f"/api/runs/{run_id}/telemetry/"


def intake_body(entries: Iterable[Mapping[str, str]]) -> bytes:
    """A request body from encoded stream entries (`encode` output): their `data` JSON is reused as it is."""
    return ('{"messages":[' + ",".join(f'{{"kind":"{f["kind"]}","data":{f["data"]}}}' for f in entries)
            + "]}").encode()
