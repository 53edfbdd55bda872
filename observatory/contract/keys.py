"""Redis key names, consumer groups and TTLs shared by the trainer, ingest and the web tier."""

from __future__ import annotations

__all__ = ["PREFIX", "RUNS_KEY", "DEADLETTER_STREAM", "DEADLETTER_COUNT_KEY", "INGEST_GROUP", "TRAINER_GROUP",
           "STREAM_MAXLEN", "STREAM_HARD_MAXLEN", "TRIM_EVERY_S", "TELEMETRY_LOST_EVENT", "HEARTBEAT_TTL_S",
           "run_key", "telemetry_stream", "telemetry_lost_key", "telemetry_trim_key", "control_stream", "ack_stream",
           "seen_commands_key", "seen_nonce_key", "checkpoints_key", "heartbeat_key", "live_group"]

PREFIX = "obs"
RUNS_KEY = f"{PREFIX}:runs"  # SET of run ids that have ever published
DEADLETTER_STREAM = f"{PREFIX}:deadletter"  # malformed entries: {stream, id, reason, raw}
DEADLETTER_COUNT_KEY = f"{PREFIX}:deadletter:count"  # HASH reason-class -> count
INGEST_GROUP = "ingest"  # consumer group of `manage.py ingest` on every telemetry stream
TRAINER_GROUP = "trainer"  # consumer group of the trainer on its control stream
# Telemetry stream caps (observatory.streams.trim): past STREAM_MAXLEN entries, what every consumer group has
# acknowledged is trimmed (a stream no group reads is cut to STREAM_MAXLEN); entries not yet acknowledged are kept up
# to STREAM_HARD_MAXLEN, past which the oldest are trimmed, counted in telemetry_lost_key and announced on the stream.
STREAM_MAXLEN = 1_000_000
STREAM_HARD_MAXLEN = 2_000_000
TRIM_EVERY_S = 1.0  # producers check the caps this often (not on every XADD)
TELEMETRY_LOST_EVENT = "telemetry_lost"  # the `event` a trim or drop of unread entries puts on the run's stream
HEARTBEAT_TTL_S = 30


def run_key(run_id: str, *parts: str) -> str:
    """PREFIX:run:<run id>:<parts, ':'-joined>, the name of every per-run key and stream."""
    return ":".join((PREFIX, "run", run_id, *parts))


def telemetry_stream(run_id: str) -> str:
    return run_key(run_id, "telemetry")


def telemetry_lost_key(run_id: str) -> str:
    """A HASH counting the run's telemetry entries lost before ingest read them: "trimmed" (past the stream's cap),
    "dropped" (a publisher's full queue, or still queued at its close)."""
    return run_key(run_id, "telemetry", "lost")


def telemetry_trim_key(run_id: str) -> str:
    """A STRING with a TTL of TRIM_EVERY_S: set by whichever producer checks the run's stream caps next."""
    return run_key(run_id, "telemetry", "trim")


def control_stream(run_id: str) -> str:
    return run_key(run_id, "control")


def ack_stream(run_id: str) -> str:
    return run_key(run_id, "acks")


def seen_commands_key(run_id: str) -> str:
    """HASH command id -> JSON {"outcome": applied|rejected|undone, "t", "command", "detail", "by"}: every id the
    trainer has answered, so a repeat is never applied twice and a replay of a rejected or undone one is refused."""
    return run_key(run_id, "control", "seen")


def seen_nonce_key(run_id: str, nonce: str) -> str:
    """A STRING per accepted command's nonce, with a TTL of contract.NONCE_MEMORY_S (as long as a copy of the entry
    could pass the freshness check): a replay inside the window is refused even when the id memory (the hash above,
    a checkpoint) has lost the command. A key of its own per nonce, so deleting the hash does not delete it."""
    return run_key(run_id, "control", "nonce", nonce)


def checkpoints_key(run_id: str) -> str:
    """A STRING holding the trainer's checkpoint list as JSON, {"t", "checkpoints": [{"step", "why", "kind",
    "saved_at", "bytes", "kept"}]}, rewritten whenever it changes: what a rollback can go back to."""
    return run_key(run_id, "checkpoints")


def heartbeat_key(run_id: str) -> str:
    """A STRING holding the last heartbeat's JSON, with a TTL, so "is it alive?" is one GET."""
    return run_key(run_id, "heartbeat")


def live_group(run_id: str) -> str:
    """The Channels group that browsers watching a run join."""
    return f"run.{run_id}"
