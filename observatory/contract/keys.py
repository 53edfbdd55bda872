"""Redis key names, consumer groups and TTLs shared by the trainer, ingest and the web tier."""

from __future__ import annotations

__all__ = ["PREFIX", "RUNS_KEY", "DEADLETTER_STREAM", "DEADLETTER_COUNT_KEY", "INGEST_GROUP", "TRAINER_GROUP",
           "STREAM_MAXLEN", "HEARTBEAT_TTL_S", "telemetry_stream", "control_stream", "ack_stream",
           "seen_commands_key", "checkpoints_key", "heartbeat_key", "live_group"]

PREFIX = "obs"
RUNS_KEY = f"{PREFIX}:runs"  # SET of run ids that have ever published
DEADLETTER_STREAM = f"{PREFIX}:deadletter"  # malformed entries: {stream, id, reason, raw}
DEADLETTER_COUNT_KEY = f"{PREFIX}:deadletter:count"  # HASH reason-class -> count
INGEST_GROUP = "ingest"  # consumer group of `manage.py ingest` on every telemetry stream
TRAINER_GROUP = "trainer"  # consumer group of the trainer on its control stream
STREAM_MAXLEN = 1_000_000  # approximate MAXLEN on telemetry streams (ingest keeps the durable copy)
HEARTBEAT_TTL_S = 30


def telemetry_stream(run_id: str) -> str:
    return f"{PREFIX}:run:{run_id}:telemetry"


def control_stream(run_id: str) -> str:
    return f"{PREFIX}:run:{run_id}:control"


def ack_stream(run_id: str) -> str:
    return f"{PREFIX}:run:{run_id}:acks"


def seen_commands_key(run_id: str) -> str:
    """HASH command id -> JSON {"outcome": applied|rejected|undone, "t", "command", "detail", "by"}: every id the
    trainer has answered, so a repeat is never applied twice and a replay of a rejected or undone one is refused."""
    return f"{PREFIX}:run:{run_id}:control:seen"


def checkpoints_key(run_id: str) -> str:
    """A STRING holding the trainer's checkpoint list as JSON, {"t", "checkpoints": [{"step", "why", "kind",
    "saved_at", "bytes", "kept"}]}, rewritten whenever it changes: what a rollback can go back to."""
    return f"{PREFIX}:run:{run_id}:checkpoints"


def heartbeat_key(run_id: str) -> str:
    """A STRING holding the last heartbeat's JSON, with a TTL, so "is it alive?" is one GET."""
    return f"{PREFIX}:run:{run_id}:heartbeat"


def live_group(run_id: str) -> str:
    """The Channels group that browsers watching a run join."""
    return f"run.{run_id}"
