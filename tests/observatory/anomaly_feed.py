"""Feeding an anomaly Monitor in the detector tests: rows of (step, {metric: value}) in, the events out."""

from __future__ import annotations

from observatory.anomalies import Monitor


def feed(mon: Monitor, rows) -> list:
    """Every event the monitor gives while it observes `rows` in order."""
    events = []
    for step, values in rows:
        events += mon.observe(step, values)
    return events


def opened(events, kind=None) -> list:
    """The events that open an anomaly (of `kind`, if given)."""
    return [e for e in events if e.action == "opened" and (kind is None or e.anomaly.kind == kind)]
