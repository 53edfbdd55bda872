"""A run's anomaly log filtered by kind, severity and status (the page and the API read the same parameters)."""

from __future__ import annotations

import re

from observatory.anomalies import SEVERITIES
from webapp.anomalies.models import STATUSES, Anomaly

KIND_RE = re.compile(r"^[a-z_]{1,40}$")
DEFAULT_LIMIT, MAX_LIMIT = 500, 5000


class FilterError(ValueError):
    """A bad filter parameter; the message names it."""


def parse(params) -> dict:
    """GET parameters -> {"kind", "severity", "status": str | "", "superseded": bool, "limit": int}."""
    out = {"kind": params.get("kind", "").strip(), "severity": params.get("severity", "").strip(),
           "status": params.get("status", "").strip()}
    if out["kind"] and not KIND_RE.match(out["kind"]):
        raise FilterError("kind must be an anomaly kind such as loss_spike")
    if out["severity"] and out["severity"] not in SEVERITIES:
        raise FilterError(f"severity must be one of {', '.join(SEVERITIES)}")
    if out["status"] and out["status"] not in STATUSES:
        raise FilterError(f"status must be one of {', '.join(STATUSES)}")
    sup = params.get("superseded", "0").strip().lower()
    if sup not in ("0", "1", "true", "false", ""):
        raise FilterError("superseded must be 0 or 1")
    out["superseded"] = sup in ("1", "true")
    raw = params.get("limit", "").strip()
    try:
        out["limit"] = int(raw) if raw else DEFAULT_LIMIT
    except ValueError:
        raise FilterError("limit must be an integer") from None
    if not 1 <= out["limit"] <= MAX_LIMIT:
        raise FilterError(f"limit must be between 1 and {MAX_LIMIT}")
    return out


def select(run_id: str, f: dict):
    """The matching anomalies, newest episode first (index anomaly_run_start); superseded ones only if asked."""
    return query(run_id, f)[:f["limit"]]


def query(run_id: str, f: dict):
    """select() before its limit (the API pages through it)."""
    qs = Anomaly.objects.filter(run_id=run_id)
    if not f["superseded"]:
        qs = qs.filter(superseded=False)
    for field in ("kind", "severity", "status"):
        if f[field]:
            qs = qs.filter(**{field: f[field]})
    return qs.select_related("acknowledged_by__profile", "resolved_by__profile")
