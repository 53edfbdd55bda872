"""The browser-facing live protocol: what travels over /ws/runs/<id>/ and through the Channels group.

Server -> client frames (JSON):
    {"type": "hello", "run": {run summary}}                              once, after connect
    {"type": "update", "run_id": id, "series": {name: SERIES}, "rewinds": [{"from_step", "to_step"}],
     "events": [EVENT], "run": {run summary} | absent, "new_series": [name]}   <= 10 per second per run
    {"type": "backfill", "run_id": id, "series": {name: SERIES}, "rewinds": [...], "events": [...],
     "truncated": [name]}                                                the reply to "resume"
    {"type": "pong"}
    {"type": "error", "error": "what was wrong"}
  SERIES = {"steps": [int], "values": [number | null], "nonfinite": [[step, "NaN" | "Infinity" | "-Infinity"]]}
  EVENT  = {"id", "kind": "event" | "state" | "rewind", "name", "step", "payload", "t"}
  A client applies `rewinds` first (drop its points with step > to_step), then appends each series' points
  whose step is greater than the last step it holds (so duplicates from resume + live overlap are dropped).

Client -> server frames (JSON):
    {"type": "resume", "metrics": [name, ...], "after_step": N, "after": {name: N}, "after_event": E}
        subscribe to these series (updates carry only subscribed series once any resume was sent) and get
        every stored point with step > after[name] (default after_step, default -1), plus events and rewinds
        with id > after_event when given. More than BACKFILL_LIMIT points for a series -> it is listed in
        "truncated" and the client should reload that series through the HTTP API.
    {"type": "ping"}
Close codes: 4404 unknown run.
"""

from __future__ import annotations

from observatory import contract
from observatory.downsample import FINITE, SPECIAL_NAMES
from webapp.metrics.changes import RunChanges

MAX_FRAME_BYTES = 64 * 1024
MAX_RESUME_METRICS = 256
BACKFILL_LIMIT = 5000
CLOSE_UNKNOWN_RUN = 4404


class ProtocolError(ValueError):
    pass


def series_json(points) -> dict:
    """[(step, value | None, special)] sorted by step -> SERIES."""
    steps, values, nonfinite = [], [], []
    for step, value, special in points:
        steps.append(step)
        values.append(value if special == FINITE else None)
        if special != FINITE:
            nonfinite.append([step, SPECIAL_NAMES[special]])
    return {"steps": steps, "values": values, "nonfinite": nonfinite}


def update_body(changes: RunChanges) -> dict:
    """The body of an "update" frame (everything but type and run_id) for what changed in a run."""
    out: dict = {
        "series": {name: series_json((s, *pts[s]) for s in sorted(pts)) for name, pts in changes.points.items()
                   if pts},
        "rewinds": changes.rewinds,
        "events": changes.events,
    }
    if changes.run:
        out["run"] = changes.run
    if changes.new_series:
        out["new_series"] = sorted(changes.new_series)
    return out


def _step(value, field: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < -1:
        raise ProtocolError(f"{field} must be an integer >= -1")
    return value


def parse_resume(msg: dict) -> tuple[dict[str, int], int | None]:
    """Validate a resume frame -> ({metric: after_step}, after_event)."""
    metrics = msg.get("metrics", [])
    if not isinstance(metrics, list) or len(metrics) > MAX_RESUME_METRICS:
        raise ProtocolError(f"metrics must be a list of at most {MAX_RESUME_METRICS} names")
    default = _step(msg.get("after_step", -1), "after_step")
    after = msg.get("after", {})
    if not isinstance(after, dict):
        raise ProtocolError("after must be an object {metric: step}")
    out: dict[str, int] = {}
    for name in [*metrics, *after]:
        if not isinstance(name, str) or not contract.METRIC_NAME_RE.match(name):
            raise ProtocolError(f"bad metric name {str(name)[:80]!r}")
        out[name] = _step(after[name], f"after[{name!r}]") if name in after else default
    if len(out) > MAX_RESUME_METRICS:
        raise ProtocolError(f"at most {MAX_RESUME_METRICS} metrics per resume")
    after_event = msg.get("after_event")
    if after_event is not None and (not isinstance(after_event, int) or isinstance(after_event, bool)
                                    or after_event < 0):
        raise ProtocolError("after_event must be an integer >= 0")
    unknown = set(msg) - {"type", "metrics", "after_step", "after", "after_event"}
    if unknown:
        raise ProtocolError(f"unknown fields {sorted(unknown)}")
    return out, after_event
