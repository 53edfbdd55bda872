"""Telemetry messages on the wire: the schema of a stream entry, its encoding and its validation, and the run-id
rule (RUN_ID_RE: 1-64 ASCII letters, digits or '_.-', starting with a letter or digit; every part checks run ids
with it). Fields, kinds and their `data`: docs/PROTOCOL.md "Telemetry entries".
"""

from __future__ import annotations

import json
import math
import re
import time
from dataclasses import dataclass
from typing import Any, Mapping

__all__ = ["SCHEMA_VERSION", "SUPPORTED_VERSIONS", "MAX_PAYLOAD_BYTES", "MAX_METRICS_PER_RECORD", "MAX_NAME_LEN",
           "MAX_DEPTH", "MAX_STEP", "KINDS", "STATES", "EVENT_NAMES", "RUN_ID_RE", "RUN_ID_PATTERN",
           "RUN_ID_CHARS", "RUN_ID_MAX_LEN", "RUN_ID_RULE", "METRIC_NAME_CHARS", "METRIC_NAME_RE",
           "ContractError", "Message", "encode", "metrics_fields", "decode", "deadletter_fields",
           "DEADLETTER_RAW_BYTES"]

SCHEMA_VERSION = "1"
SUPPORTED_VERSIONS = frozenset({"1"})

# Largest accepted `data` payload. A metrics record with a few hundred router numbers is ~20 KB.
MAX_PAYLOAD_BYTES = 256 * 1024
DEADLETTER_RAW_BYTES = 64 * 1024  # of a refused entry's fields kept in its dead letter
MAX_METRICS_PER_RECORD = 4096
MAX_NAME_LEN = 200
MAX_DEPTH = 32  # nesting of `data`: deeper payloads would blow the stack of whatever walks them later
MAX_STEP = 2**62  # fits a signed 64-bit column on every database, with room for arithmetic

KINDS = ("run", "metrics", "event", "state", "heartbeat", "rewind", "manifest")
STATES = ("starting", "compiling", "training", "paused", "checkpointing", "stopped", "failed")
EVENT_NAMES = ("compiled", "resumed", "checkpoint_saved", "checkpoint_written", "command", "lr_multiplier",
               "lr_replan", "mixture_changed", "fault_injected", "rollback", "commands_rolled_back", "forecast",
               "telemetry_lost")

RUN_ID_CHARS = "A-Za-z0-9_.-"  # a regex character-class body: what a run id may hold (sanitisers: [^...])
RUN_ID_MAX_LEN = 64
RUN_ID_PATTERN = rf"^[A-Za-z0-9][{RUN_ID_CHARS}]{{0,{RUN_ID_MAX_LEN - 1}}}$"  # JSON Schema / JS / URL routes
RUN_ID_RE = re.compile(RUN_ID_PATTERN[:-1] + r"\Z")  # \Z: Python's $ would let a trailing newline through
RUN_ID_RULE = f"1-{RUN_ID_MAX_LEN} ASCII letters, digits or '_.-', starting with a letter or digit"
METRIC_NAME_CHARS = "A-Za-z0-9_./:-"  # what a metric name may hold (the importers' sanitisers: [^...])
METRIC_NAME_RE = re.compile(rf"^[A-Za-z0-9_][{METRIC_NAME_CHARS}]{{0,{MAX_NAME_LEN - 1}}}\Z")


# ---------------------------------------------------------------------------------------------- errors
class ContractError(ValueError):
    """A message that breaks the contract. `reason` is short and stable enough to count by."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class Message:
    run: str
    kind: str
    data: dict[str, Any]
    v: str = SCHEMA_VERSION


# ---------------------------------------------------------------------------------------------- encoding
def _dumps(obj: Any) -> str:
    # allow_nan: NaN/Infinity are meaningful (a diverged loss), so they travel as JSON's common extension.
    return json.dumps(obj, separators=(",", ":"), allow_nan=True)


def encode(run: str, kind: str, data: Mapping[str, Any]) -> dict[str, str]:
    """Build the stream fields for one message. Validates so that producers fail early, not ingest."""
    fields = {"v": SCHEMA_VERSION, "kind": kind, "run": run, "data": _dumps(dict(data))}
    decode(fields, expect_run=run)
    return fields


def metrics_fields(run: str, step: int, values: Mapping[str, float], t: float | None = None) -> dict[str, str]:
    return {
        "v": SCHEMA_VERSION,
        "kind": "metrics",
        "run": run,
        "data": _dumps({"t": time.time() if t is None else t, "step": int(step),
                        "values": {k: _num(v) for k, v in values.items()}}),
    }


def _num(v: Any) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def _text(raw: Any) -> str:
    if isinstance(raw, bytes):
        return raw.decode("utf-8", errors="strict")
    return raw


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _require(data: dict, key: str, typ, kind: str):
    if key not in data:
        raise ContractError("missing_field", f"{kind}.{key}")
    val = data[key]
    if typ == "number":
        if not _is_number(val):
            raise ContractError("wrong_type", f"{kind}.{key} must be a number")
    elif typ == "step":
        if not isinstance(val, int) or isinstance(val, bool) or not 0 <= val <= MAX_STEP:
            raise ContractError("wrong_type", f"{kind}.{key} must be an integer in [0, 2**62]")
    elif not isinstance(val, typ):
        raise ContractError("wrong_type", f"{kind}.{key} must be {getattr(typ, '__name__', typ)}")
    return val


def decode(fields: Mapping[Any, Any], expect_run: str | None = None) -> Message:
    """Validate one stream entry (bytes or str keys/values) and return it as a Message.

    Raises ContractError with a countable reason: missing_field, wrong_type, bad_version, unknown_kind,
    oversized, bad_json, too_deep, bad_run, bad_name.
    """
    try:
        f = {_text(k): _text(v) for k, v in fields.items()}
    except UnicodeDecodeError as e:
        raise ContractError("bad_encoding", str(e)) from None
    for key in ("v", "kind", "run", "data"):
        if key not in f:
            raise ContractError("missing_field", key)
    if f["v"] not in SUPPORTED_VERSIONS:
        raise ContractError("bad_version", f"schema version {f['v']!r} not in {sorted(SUPPORTED_VERSIONS)}")
    kind = f["kind"]
    if kind not in KINDS:
        raise ContractError("unknown_kind", repr(kind)[:80])
    run = f["run"]
    if not RUN_ID_RE.match(run or ""):
        raise ContractError("bad_run", repr(run)[:80])
    if expect_run is not None and run != expect_run:
        raise ContractError("bad_run", f"entry for {run!r} on the stream of {expect_run!r}")
    raw = f["data"]
    if len(raw) > MAX_PAYLOAD_BYTES:
        raise ContractError("oversized", f"{len(raw)} bytes > {MAX_PAYLOAD_BYTES}")
    try:
        data = json.loads(raw)
    except (ValueError, TypeError, RecursionError) as e:
        raise ContractError("bad_json", str(e)[:120]) from None
    if not isinstance(data, dict):
        raise ContractError("wrong_type", "data must be a JSON object")
    if kind != "metrics" and _depth_exceeds(data, MAX_DEPTH):  # metrics are checked flat by their validator
        raise ContractError("too_deep", f"data nested deeper than {MAX_DEPTH} levels")
    _require(data, "t", "number", kind)
    _VALIDATORS[kind](data)
    return Message(run=run, kind=kind, data=data, v=f["v"])


def _depth_exceeds(obj: Any, limit: int) -> bool:
    """Iterative (a recursive walk is exactly what a hostile payload would overflow)."""
    todo = [(obj, 1)]
    while todo:
        x, depth = todo.pop()
        if depth > limit:
            return True
        if isinstance(x, dict):
            todo.extend((v, depth + 1) for v in x.values() if isinstance(v, (dict, list)))
        elif isinstance(x, list):
            todo.extend((v, depth + 1) for v in x if isinstance(v, (dict, list)))
    return False


def _v_run(d):
    _require(d, "name", str, "run")
    _require(d, "config", dict, "run")


def _v_metrics(d):
    _require(d, "step", "step", "metrics")
    values = _require(d, "values", dict, "metrics")
    if len(values) > MAX_METRICS_PER_RECORD:
        raise ContractError("oversized", f"{len(values)} metrics > {MAX_METRICS_PER_RECORD}")
    for name, val in values.items():
        if not METRIC_NAME_RE.match(name):
            raise ContractError("bad_name", repr(name)[:80])
        if not _is_number(val):
            raise ContractError("wrong_type", f"metrics.values[{name!r}] must be a number")


def _v_event(d):
    _require(d, "step", "step", "event")
    name = _require(d, "name", str, "event")
    if not name or len(name) > MAX_NAME_LEN:
        raise ContractError("bad_name", repr(name)[:80])
    if "payload" in d and not isinstance(d["payload"], dict):
        raise ContractError("wrong_type", "event.payload must be an object")


def _v_state(d):
    state = _require(d, "state", str, "state")
    if state not in STATES:
        raise ContractError("wrong_type", f"state.state {state!r} not in {STATES}")
    _require(d, "step", "step", "state")


def _v_heartbeat(d):
    phase = _require(d, "phase", str, "heartbeat")
    if phase not in STATES:
        raise ContractError("wrong_type", f"heartbeat.phase {phase!r} not in {STATES}")
    _require(d, "step", "step", "heartbeat")


def _v_rewind(d):
    a = _require(d, "from_step", "step", "rewind")
    b = _require(d, "to_step", "step", "rewind")
    if b > a:
        raise ContractError("wrong_type", "rewind.to_step must be <= from_step")


def _v_manifest(d):
    _require(d, "manifest", dict, "manifest")


_VALIDATORS = {"run": _v_run, "metrics": _v_metrics, "event": _v_event, "state": _v_state,
               "heartbeat": _v_heartbeat, "rewind": _v_rewind, "manifest": _v_manifest}


def deadletter_fields(stream: str, entry_id: str, reason: str, raw: Mapping[Any, Any],
                      error: str = "") -> dict[str, str]:
    """What ingest writes to DEADLETTER_STREAM for an entry it cannot accept, whatever the reason: the entry's
    fields as JSON ("raw"; their repr when undecodable), at most DEADLETTER_RAW_BYTES of it ("truncated": "1" when
    cut, "bytes": the whole size), and the error that refused it."""
    try:
        raw_text = _dumps({_text(k): _text(v) for k, v in raw.items()})
    except Exception:  # undecodable bytes: keep a repr so nothing is silently lost
        raw_text = repr(dict(raw))
    data = raw_text.encode("utf-8", "backslashreplace")
    kept = data[:DEADLETTER_RAW_BYTES].decode("utf-8", "ignore")  # (a character cut in two is left out)
    return {"stream": stream, "id": entry_id, "reason": reason, "raw": kept,
            "truncated": "1" if len(data) > DEADLETTER_RAW_BYTES else "0", "bytes": str(len(data)),
            "error": error[:1000], "t": repr(time.time())}


