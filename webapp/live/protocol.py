"""The browser-facing live protocol: what travels over /ws/runs/<id>/ and through the Channels group — frame
builders, the limits sent in "hello", and the close codes. Frames, limits and close codes are explained in
docs/PROTOCOL.md "Browser live protocol".
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
RESUME_MAX_ENTRIES = 300  # a resume from the live log replays at most this many entries; further back: a "gap"

CLOSE_TRY_AGAIN = 1013
CLOSE_TOO_SLOW = 4008
CLOSE_RESYNC = 4012
CLOSE_FORBIDDEN = 4403
CLOSE_UNKNOWN_RUN = 4404
CLOSE_RATE = 4429

LIMITS = {"max_frame_bytes": MAX_FRAME_BYTES, "max_resume_metrics": MAX_RESUME_METRICS,
          "backfill_limit": BACKFILL_LIMIT, "max_backfill_points": MAX_BACKFILL_POINTS, "max_depth": MAX_DEPTH,
          "rate_per_s": RATE_PER_S, "rate_burst": RATE_BURST, "resume_max_entries": RESUME_MAX_ENTRIES}


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


def frame_of(run_id: str, payload: dict) -> dict:
    """The frame for a pushed body: an "update" unless the body names its own type (feature frames). An update's
    "t" (the newest step's publish time) stays for the readers' delay metrics; they strip it before browsers."""
    if "type" in payload:
        return dict(payload)
    return {"type": "update", "run_id": run_id, **payload}


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
    after_seq = msg.get("after_seq")
    if after_seq is not None and (not isinstance(after_seq, int) or isinstance(after_seq, bool) or after_seq < 0):
        raise ProtocolError("after_seq must be an integer >= 0")
    unknown = set(msg) - {"type", "metrics", "after_step", "after", "after_event", "after_seq"}
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
