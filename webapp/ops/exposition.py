"""Prometheus text exposition (format 0.0.4) without a client library: families of samples, and the registry of
collectors that later apps (webapp.live) add their in-process numbers to. Ops itself reads Redis (redis_metrics)."""

from __future__ import annotations

import hashlib
import hmac
import math
from dataclasses import dataclass, field
from typing import Callable, Iterable

# Where ingest processes leave their counters for /metrics: a hash per consumer, with a TTL (webapp.live's
# ingest command writes it). Processes coordinate only through Redis keys.
INGEST_STATS_PREFIX = "obs:ingest:stats:"
INGEST_STATS_TTL_S = 60
# Labels whose values name a process (an ingest consumer is "ingest-<hostname>-<pid>" by default): /metrics shows
# a replica id in their place, never a host name or a pid.
PROCESS_LABELS = ("consumer",)


@dataclass
class Family:
    name: str
    kind: str  # counter | gauge | histogram
    help: str
    samples: list[tuple[str, dict, float]] = field(default_factory=list)  # (suffix, labels, value)

    def add(self, value: float, suffix: str = "", **labels) -> Family:
        self.samples.append((suffix, labels, value))
        return self


def histogram(name: str, help: str, buckets: Iterable[float], counts: list[int], total: int, sum_: float) -> Family:
    """A histogram family from cumulative bucket counts (counts[i]: observations <= buckets[i])."""
    fam = Family(name, "histogram", help)
    for le, n in zip(buckets, counts):
        fam.add(n, "_bucket", le=repr(float(le)))
    fam.add(total, "_bucket", le="+Inf")
    fam.add(total, "_count")
    fam.add(sum_, "_sum")
    return fam


collectors: list[Callable[[], Iterable[Family]]] = []  # in-process numbers of later apps
# /healthz's words from later apps: callables () -> {key: short public text} (webapp.live: "live_lag")
health_checks: list[Callable[[], dict[str, str]]] = []


def replica_id(name: str, key: str) -> str:
    """A stable, opaque id for a process name: the same name gives the same id, the id gives nothing away."""
    return "r" + hmac.new(key.encode(), name.encode(), hashlib.sha256).hexdigest()[:10]


def without_process_names(families: Iterable[Family], key: str) -> list[Family]:
    """The families with every PROCESS_LABELS value replaced by its replica id."""
    out = list(families)
    for fam in out:
        fam.samples = [(suffix, {k: replica_id(str(v), key) if k in PROCESS_LABELS else v
                                 for k, v in labels.items()}, value) for suffix, labels, value in fam.samples]
    return out


def _escape(v: str) -> str:
    return str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _num(v: float) -> str:
    if isinstance(v, float) and math.isnan(v):
        return "NaN"
    if isinstance(v, float) and math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v)) if isinstance(v, float) else str(int(v))


def render(families: Iterable[Family]) -> str:
    out = []
    for fam in families:
        out.append(f"# HELP {fam.name} {fam.help}")
        out.append(f"# TYPE {fam.name} {fam.kind}")
        for suffix, labels, value in fam.samples:
            lab = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
            out.append(f"{fam.name}{suffix}{{{lab}}} {_num(value)}" if lab else f"{fam.name}{suffix} {_num(value)}")
    return "\n".join(out) + "\n"
