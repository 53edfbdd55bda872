"""The Redis stream seam: the one place that talks to Redis streams, used by the trainer, ingest and the web.

    publisher  Publisher: a non-blocking, batching, reconnecting writer of one run's telemetry stream (on
               QueuedPublisher, its transport-free part); add_telemetry: the Redis writes of encoded entries
    consumer   StreamConsumer, read_group, ensure_group, streams_reply: consumer-group reading with the shared
               rules (own pending entries first, NOGROUP recovery), connect() and Backoff
    trim       trim_telemetry, maybe_trim: the stream caps (only acknowledged entries trimmed; losses counted)

Unlike `observatory.contract` and the series math, this package does I/O (it imports redis).
"""

from observatory.streams.consumer import (Backoff, StreamConsumer, connect, ensure_group, is_nogroup,
                                          newest_metrics_step, read_group, streams_reply, text)
from observatory.streams.publisher import Publisher, QueuedPublisher, add_telemetry
from observatory.streams.trim import maybe_trim, trim_telemetry

__all__ = ["Backoff", "Publisher", "QueuedPublisher", "StreamConsumer", "add_telemetry", "connect", "ensure_group",
           "is_nogroup", "maybe_trim", "newest_metrics_step", "read_group", "streams_reply", "text",
           "trim_telemetry"]
