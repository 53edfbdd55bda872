"""The pre-registration record: a frozen forecast bound to the experiment, its rungs and one target run config.

    {"kind": "observatory.forecast_registration", "version": 1,
     "experiment": {"name", "goal", "hypothesis"},
     "forecast": <Forecast.to_dict(), with its own sha256>,
     "rung_runs": [run ids of the ladder rungs it was fitted on],
     "target": {"config_hash": str, "run_id": str, "N": float, "D": float, "x": "tokens"},
     "created_at": unix seconds (float),
     "sha256": SHA-256 of the canonical JSON (forecast.canonical_json) of every other field}

`target.config_hash` is the target run's config hash (training.experiment.config_hash): a trainer refuses a
registration for another config, and one created after the run's first start. The record is pure data (no I/O
here): the ladder writes it, the trainer reads and verifies it, the web draws it. `verify` refuses a record whose
hash does not match its content, or whose embedded forecast's own hash does not match, naming which.
"""

from __future__ import annotations

import hashlib
import json
import math

from observatory.scaling.forecast import Forecast, canonical_json

__all__ = ["KIND", "VERSION", "make_registration", "registration_hash", "verify", "from_json", "to_json"]

KIND = "observatory.forecast_registration"
VERSION = 1
_FIELDS = ("kind", "version", "experiment", "forecast", "rung_runs", "target", "created_at")
_EXPERIMENT = ("name", "goal", "hypothesis")
_TARGET = ("config_hash", "run_id", "N", "D", "x")


def registration_hash(record: dict) -> str:
    """SHA-256 of the canonical JSON of every field but "sha256"."""
    body = {k: v for k, v in record.items() if k != "sha256"}
    return hashlib.sha256(canonical_json(body).encode()).hexdigest()


def make_registration(forecast: Forecast | dict, *, experiment: dict, rung_runs: list[str], target: dict,
                      created_at: float) -> dict:
    """Build and hash a registration. `target` needs config_hash, run_id, N and D ("x" defaults to "tokens")."""
    fc = forecast.to_dict() if isinstance(forecast, Forecast) else dict(forecast)
    record = {
        "kind": KIND, "version": VERSION,
        "experiment": {k: str(experiment.get(k) or "") for k in _EXPERIMENT},
        "forecast": fc,
        "rung_runs": [str(r) for r in rung_runs],
        "target": {"config_hash": str(target["config_hash"]), "run_id": str(target["run_id"]),
                   "N": float(target["N"]), "D": float(target["D"]), "x": str(target.get("x", "tokens"))},
        "created_at": float(created_at),
    }
    record = json.loads(canonical_json(record))  # stored as it will read back, so a round trip is equal
    record["sha256"] = registration_hash(record)
    return verify(record)


def _need(cond: bool, what: str) -> None:
    if not cond:
        raise ValueError(f"forecast registration: {what}")


def verify(record: dict) -> dict:
    """Check shape and hashes; returns the record. ValueError naming the problem (e.g. "hash mismatch")."""
    _need(isinstance(record, dict), "must be a JSON object")
    _need(record.get("kind") == KIND, f"kind must be {KIND!r}, got {record.get('kind')!r}")
    _need(record.get("version") == VERSION, f"unsupported version {record.get('version')!r} (known: {VERSION})")
    missing = [k for k in (*_FIELDS, "sha256") if k not in record]
    _need(not missing, f"missing field(s) {', '.join(missing)}")
    extra = [k for k in record if k not in (*_FIELDS, "sha256")]
    _need(not extra, f"unknown field(s) {', '.join(extra)}")
    exp, target = record["experiment"], record["target"]
    _need(isinstance(exp, dict) and all(isinstance(exp.get(k), str) for k in _EXPERIMENT),
          "experiment must hold strings name, goal, hypothesis")
    _need(isinstance(target, dict) and all(k in target for k in _TARGET),
          f"target must hold {', '.join(_TARGET)}")
    _need(isinstance(target["config_hash"], str) and len(target["config_hash"]) == 64,
          "target.config_hash must be a 64-digit hex SHA-256")
    for k in ("N", "D"):
        v = target[k]
        _need(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0,
              f"target.{k} must be a positive number")
    _need(target["x"] == "tokens", f"target.x must be 'tokens', got {target['x']!r}")
    _need(isinstance(record["rung_runs"], list) and all(isinstance(r, str) for r in record["rung_runs"]),
          "rung_runs must be a list of run ids")
    t = record["created_at"]
    _need(isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t) and t > 0,
          "created_at must be unix seconds")
    _need(isinstance(record["forecast"], dict), "forecast must be an object")
    try:
        Forecast.from_dict(record["forecast"])
    except (KeyError, TypeError) as e:
        raise ValueError(f"forecast registration: forecast is not a forecast record ({e})") from None
    except ValueError as e:
        raise ValueError(f"forecast registration: forecast {e}") from None
    stored, actual = record["sha256"], registration_hash(record)
    _need(stored == actual, f"hash mismatch: stored {stored}, content hashes to {actual} (edited after it was made?)")
    return record


def to_json(record: dict) -> str:
    """Canonical JSON of the whole record (the bytes the ladder writes)."""
    return canonical_json(record)


def from_json(text: str) -> dict:
    """Parse and verify; ValueError for bad JSON or a record that does not verify."""
    try:
        record = json.loads(text)
    except ValueError as e:
        raise ValueError(f"forecast registration: not JSON ({e})") from None
    return verify(record)
