"""Anomaly records, the events that open/update/close them, and the episode bookkeeping all detectors share.

An anomaly is an *episode*: it opens on the step where a detector first sees it, may be updated while it lasts
(a new peak, a higher severity), and closes when the series recovers. Every change is an `Event` carrying the
whole record, so a consumer keeps a store current by upserting on `Anomaly.key` (kind, metric, start step).

Inside a detector's state an open episode is a plain dict ("start", "peak", "score", "severity", "why", plus
detector-specific fields), so states stay JSON-able; `anomaly(kind, metric, ep)` turns one into the record.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Iterable, NamedTuple

INFO, WARNING, CRITICAL = "info", "warning", "critical"
SEVERITIES = (INFO, WARNING, CRITICAL)
RANK = {s: i for i, s in enumerate(SEVERITIES)}

OPENED, UPDATED, CLOSED, SUPERSEDED = "opened", "updated", "closed", "superseded"


@dataclass(frozen=True)
class Anomaly:
    kind: str  # loss_spike, grad_norm_spike, nonfinite, stall, hot_expert, ... (see docs/ANOMALIES.md)
    metric: str  # the series it was seen on (for grouped detectors: the most telling member)
    start_step: int
    peak_step: int
    end_step: int | None  # None while open
    severity: str  # info | warning | critical
    score: float  # bigger is worse; its unit depends on the kind (a ratio, a fraction, a count)
    explanation: str  # one line with the numbers

    @property
    def key(self) -> str:
        """Stable identity for upserts: a detector never opens two episodes of one metric at one step."""
        return f"{self.kind} {self.metric} {self.start_step}"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Anomaly":
        return cls(**{f.name: d[f.name] for f in fields(cls)})


class Event(NamedTuple):
    action: str  # opened | updated | closed | superseded
    anomaly: Anomaly
    at: int  # the step whose data caused the event (delay = at - start of the real event)


def severity_for(score: float, warn: float, crit: float) -> str:
    return CRITICAL if score >= crit else WARNING if score >= warn else INFO


def fmt(x: float) -> str:
    """Numbers for one-line explanations: 4 significant digits, thousands separators for big ones."""
    if not math.isfinite(x):
        return str(x)
    return f"{x:,.0f}" if abs(x) >= 10_000 else f"{x:.4g}"


def anomaly(kind: str, metric: str, ep: dict, end: int | None = None) -> Anomaly:
    # grouped detectors keep the member (and, for two-sided ones, the kind) that opened the episode in it
    return Anomaly(ep.get("kind", kind), ep.get("metric", metric), ep["start"], ep["peak"], end, ep["severity"],
                   ep["score"], ep["why"])


def open_ep(kind: str, metric: str, at: int, start: int, score: float, severity: str, why: str, /,
            **extra) -> tuple[dict, list[Event]]:
    ep = {"start": start, "peak": at, "score": score, "severity": severity, "why": why, **extra}
    return ep, [Event(OPENED, anomaly(kind, metric, ep), at)]


def peak_ep(kind: str, metric: str, ep: dict, at: int, score: float, severity: str, why: str, /,
            **extra) -> tuple[dict, list[Event]]:
    """A new reading inside an open episode: an update only when it is a new peak (or a higher severity)."""
    if score <= ep["score"] and RANK[severity] <= RANK[ep["severity"]]:
        return ep, []
    if score > ep["score"]:
        ep = {**ep, "peak": at, "score": score, "why": why, **extra}
    if RANK[severity] > RANK[ep["severity"]]:
        ep = {**ep, "severity": severity}
    return ep, [Event(UPDATED, anomaly(kind, metric, ep), at)]


def close_ep(kind: str, metric: str, ep: dict, at: int) -> list[Event]:
    return [Event(CLOSED, anomaly(kind, metric, ep, end=at), at)]


class AnomalyLog:
    """Folds events into the current anomaly records, in opening order: what a store would hold.

    The scanner prints its content; the live path can use it to answer "what is open now".
    """

    def __init__(self) -> None:
        self._by_key: dict[str, Anomaly] = {}

    def apply(self, events: Iterable[Event]) -> None:
        for ev in events:
            if ev.action == SUPERSEDED:
                self._by_key.pop(ev.anomaly.key, None)
            else:
                self._by_key[ev.anomaly.key] = ev.anomaly

    def anomalies(self) -> list[Anomaly]:
        return list(self._by_key.values())
