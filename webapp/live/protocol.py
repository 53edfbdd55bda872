"""The browser-facing live protocol: what travels over /ws/runs/<id>/ and through the Channels group.

Server -> client frames (JSON text):
    {"type": "hello", "run": {run summary}, "limits": {LIMITS}}          once, after connect
    {"type": "update", "run_id": id, "series": {name: SERIES}, "rewinds": [{"from_step", "to_step"}],
     "events": [EVENT], "run": {run summary} | absent, "new_series": [name]}
    {"type": "backfill", "run_id": id, "series": {name: SERIES}, "rewinds": [...], "events": [...],
     "truncated": [name]}                                                the reply to "resume"
    {"type": "pong"}
    {"type": "error", "error": "what was wrong"}
    [FRAME, FRAME, ...]   a coalesced batch: several frames above (or feature frames), in order, in one message
  SERIES = {"steps": [int], "values": [number | null], "nonfinite": [[step, "NaN" | "Infinity" | "-Infinity"]]}
  EVENT  = {"id", "kind": "event" | "state" | "rewind", "name", "step", "payload", "t"}
  A client applies `rewinds` first (drop its points with step > to_step), then appends each series' points
  whose step is greater than the last step it holds (so duplicates from resume + live overlap are dropped).
  A client handles the frames of a batch one after the other, exactly as if they had come one by one.
  Feature frames (other "type"s, pushed with push.LivePublisher.send / push_frame) reach every viewer unfiltered.
  Annotations (webapp.annotations.live; sent after the write commits, as a `live.update` group message whose
  payload carries its own type, because annotations precedes live in the web chain). Public content only:
    {"type": "annotation", "run_id": id, "event": "upsert", "annotation": ANNOTATION}   created, edited, restored
    {"type": "annotation", "run_id": id, "event": "remove", "id": aid, "reason": "hidden" | "deleted"}
    {"type": "annotation", "run_id": id, "event": "reply", "annotation_id": aid, "reply": REPLY, "reply_count": n}
    {"type": "annotation", "run_id": id, "event": "reply_remove", "annotation_id": aid, "id": rid,
     "reason": "hidden" | "deleted", "reply_count": n}
    {"type": "annotation", "run_id": id, "event": "reactions", "target": "annotation" | "reply", "id": n,
     "annotation_id": aid, "reactions": {kind: count}}
  ANNOTATION, REPLY: the records of GET /api/annotations/<aid>/ (webapp/annotations/api.py) as the public sees them.

Fan-out (webapp.live.hub): each server process holds ONE channel-layer subscription per watched run, and encodes
each update once per distinct subscription ("variant") rather than once per socket; all sockets of a variant share
the same text. A process sends a socket at most one message per `hub.interval()`: more sockets, longer interval
(frame budget), pending frames then travel as one batch. So every viewer gets every update, coalesced under load.

Client -> server frames (JSON):
    {"type": "resume", "metrics": [name, ...], "after_step": N, "after": {name: N}, "after_event": E}
        subscribe to these series (updates carry only subscribed series once any resume was sent) and get
        every stored point with step > after[name] (default after_step, default -1), plus events and rewinds
        with id > after_event when given. More than BACKFILL_LIMIT points for a series, or more than
        MAX_BACKFILL_POINTS for the whole resume -> the series is listed in "truncated" and the client should
        reload it through the HTTP API.
    {"type": "ping"}

Limits (sent in "hello" as LIMITS; past one: an "error" frame, or a close as noted):
    MAX_FRAME_BYTES      a client frame's size (larger: error frame; far larger: the server closes with 1009)
    MAX_RESUME_METRICS   names in one resume
    MAX_BACKFILL_POINTS  points one resume's backfill may carry in total
    MAX_DEPTH            nesting of a client frame (deeper: error frame, never a 1011)
    RATE_PER_S, RATE_BURST   client messages per second per socket (token bucket): past it, close 4429
    MAX_PENDING_FRAMES   updates queued for a socket that does not read: past it, close 4008 (reconnect, resume)
Close codes: 4403 not allowed to view runs, 4404 unknown run, 4429 too many messages, 4008 too slow to keep up,
4012 the server missed an update (reconnect and resume: the backfill fills the hole), 1013 live updates
unavailable right now (Redis down; reconnect later).
"""

from __future__ import annotations

import json
import time

from observatory import contract
from observatory.downsample import FINITE, SPECIAL_NAMES
from webapp.metrics.changes import RunChanges

MAX_FRAME_BYTES = 64 * 1024
MAX_RESUME_METRICS = 256
BACKFILL_LIMIT = 5000  # points per series in one backfill
MAX_BACKFILL_POINTS = 100_000  # points in one backfill, all series together
MAX_DEPTH = 16  # a resume is 3 deep; json.loads itself would recurse thousands deep
RATE_PER_S = 10.0  # a browser sends one resume per loaded series chunk and a ping now and then
RATE_BURST = 60
MAX_PENDING_FRAMES = 300  # ~a minute of updates at 5/s

CLOSE_TRY_AGAIN = 1013
CLOSE_TOO_SLOW = 4008
CLOSE_RESYNC = 4012
CLOSE_FORBIDDEN = 4403
CLOSE_UNKNOWN_RUN = 4404
CLOSE_RATE = 4429

LIMITS = {"max_frame_bytes": MAX_FRAME_BYTES, "max_resume_metrics": MAX_RESUME_METRICS,
          "backfill_limit": BACKFILL_LIMIT, "max_backfill_points": MAX_BACKFILL_POINTS, "max_depth": MAX_DEPTH,
          "rate_per_s": RATE_PER_S, "rate_burst": RATE_BURST}


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
    times = getattr(changes, "times", None)
    if times:  # the newest step's publish time: the hub measures push delay from it (stripped before browsers)
        out["t"] = max(times.values())
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


def depth(obj, limit: int = MAX_DEPTH) -> int:
    """Nesting depth of a decoded frame, counting no further than limit + 1."""
    if limit < 0 or not isinstance(obj, (dict, list)):
        return 0
    items = obj.values() if isinstance(obj, dict) else obj
    return 1 + max((depth(v, limit - 1) for v in items), default=0)


def parse_frame(text: str) -> dict:
    """A client's text frame -> its object, or ProtocolError with a message for the "error" frame."""
    if len(text) > MAX_FRAME_BYTES:
        raise ProtocolError(f"frame larger than {MAX_FRAME_BYTES} bytes")
    try:
        msg = json.loads(text)
    except RecursionError:  # thousands of '[': the decoder's own recursion, before any check of ours
        raise ProtocolError(f"frame nested deeper than {MAX_DEPTH} levels") from None
    except ValueError:
        raise ProtocolError("frame is not JSON") from None
    if depth(msg) > MAX_DEPTH:
        raise ProtocolError(f"frame nested deeper than {MAX_DEPTH} levels")
    if not isinstance(msg, dict) or not isinstance(msg.get("type"), str):
        raise ProtocolError("frame must be an object with a string 'type'")
    return msg


def encode(frame) -> str:
    """A server frame as JSON text (non-finite values travel as null + "nonfinite", never as NaN tokens)."""
    return json.dumps(frame, separators=(",", ":"), allow_nan=False)


class TokenBucket:
    """Client messages per socket: `rate` per second, bursts up to `burst`."""

    def __init__(self, rate: float = RATE_PER_S, burst: int = RATE_BURST):
        self.rate, self.burst = rate, float(burst)
        self.tokens, self.at = float(burst), time.monotonic()

    def take(self) -> bool:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        return True
