"""Anomaly detection on training metrics: pure detectors, the per-run Monitor, and the offline CSV scanner.

Pure (no I/O library): the same code runs inside ingest, scans a CSV offline, and resumes from a snapshot.
See docs/ANOMALIES.md for the kinds, the thresholds and the API the live path calls.

    model      Anomaly, Event, AnomalyLog, severities
    detectors  per-series state machines: spikes, sustained shifts, thresholds, skipped steps, loss scale
    nonfinite  NaN/±Inf on any metric, one episode per divergence
    moe        hot/dead experts, router-bias runaway (one layer's per-expert values at once)
    stall      no step for too long while the heartbeat lives; heartbeat lost (time is passed in)
    routing    default thresholds (Config) and the metric name -> detectors table
    monitor    Monitor: a run's detectors fed whole steps; snapshot/restore/rewind
    scan       CSV reader and scanner (`python -m observatory.anomalies scan FILE.csv`)
"""

from observatory.anomalies.model import (CLOSED, CRITICAL, INFO, OPENED, SEVERITIES, SUPERSEDED, UPDATED, WARNING,
                                         Anomaly, AnomalyLog, Event)
from observatory.anomalies.monitor import Monitor
from observatory.anomalies.routing import M_LOSS_SCALE, Config
from observatory.anomalies.stall import StallDetector

__all__ = ["Anomaly", "AnomalyLog", "Event", "Monitor", "Config", "StallDetector", "M_LOSS_SCALE", "SEVERITIES",
           "INFO", "WARNING", "CRITICAL", "OPENED", "UPDATED", "CLOSED", "SUPERSEDED"]
