"""This process's live fan-out counters, read by the /metrics endpoint (webapp.ops): plain numbers, no locks
(one event loop writes them)."""

from __future__ import annotations

# Upper bounds (seconds) of the push-delay histogram buckets; Prometheus' cumulative "le" buckets.
BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

counters = {"frames_sent": 0, "messages_sent": 0, "bytes_sent": 0, "updates_received": 0, "flushes": 0,
            "variants_encoded": 0, "closed_slow": 0, "closed_rate": 0, "resyncs": 0}
gauges = {"clients": 0}


class Histogram:
    def __init__(self):
        self.counts = [0] * len(BUCKETS)
        self.total = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        value = max(0.0, value)
        for i, le in enumerate(BUCKETS):
            if value <= le:
                self.counts[i] += 1
        self.total += 1
        self.sum += value


relay_delay = Histogram()  # ingest's push -> this process's fan-out
push_delay = Histogram()  # the step's publish by the trainer -> this process's fan-out (when the update says)


def clients(n: int) -> None:
    gauges["clients"] = n


def sent(frames: int, nbytes: int) -> None:
    counters["messages_sent"] += 1
    counters["frames_sent"] += frames
    counters["bytes_sent"] += nbytes


def relayed(now: float, sent_at, step_t) -> None:
    counters["updates_received"] += 1
    if isinstance(sent_at, (int, float)):
        relay_delay.observe(now - sent_at)
    if isinstance(step_t, (int, float)):
        push_delay.observe(now - step_t)


def flushed(frames: int, variants: int) -> None:
    counters["flushes"] += 1
    counters["variants_encoded"] += variants


def count(name: str) -> None:
    counters[name] += 1
