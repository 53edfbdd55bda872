"""The Redis stream seam: the one place that talks to Redis streams, used by the trainer, ingest and the web.

    queued     QueuedPublisher: the transport-free queue and writer thread of every publisher (standard library)
    publisher  Publisher: a non-blocking, batching, reconnecting writer of one run's telemetry stream (on
               QueuedPublisher); add_telemetry: the Redis writes of encoded entries
    consumer   StreamConsumer, read_group, ensure_group, streams_reply: consumer-group reading with the shared
               rules (own pending entries first, NOGROUP recovery), connect() and Backoff
    trim       trim_telemetry, maybe_trim: the stream caps (only acknowledged entries trimmed; losses counted)

Unlike `observatory.contract` and the series math, this package does I/O (it imports redis). The Redis names load on
first use, so `QueuedPublisher` (and with it the client's HTTP mode) needs no `redis` package installed.
"""

import importlib

from observatory.streams.queued import QueuedPublisher

_REDIS_NAMES = {"Backoff": "consumer", "StreamConsumer": "consumer", "connect": "consumer",
                "ensure_group": "consumer", "is_nogroup": "consumer", "newest_metrics_step": "consumer",
                "read_group": "consumer", "streams_reply": "consumer", "text": "consumer",
                "Publisher": "publisher", "add_telemetry": "publisher",
                "maybe_trim": "trim", "trim_telemetry": "trim"}

__all__ = ["QueuedPublisher", *_REDIS_NAMES]


def __getattr__(name: str):
    module = _REDIS_NAMES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
