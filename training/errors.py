"""Errors of the trainer, and what each becomes at the command line.

ConfigError -> `config error: <key>: <message>`, exit 2. TrainingFailed -> state `failed`, exit 1.
CommandError (the contract's) -> a `rejected` ack; the run carries on. CheckpointError -> TrainingFailed at start.
Interrupted -> state `stopped`, exit 0 (a signal before the first step: nothing new to checkpoint).
"""

from observatory.contract import CommandError

__all__ = ["CheckpointError", "CommandError", "ConfigError", "Interrupted", "TrainingFailed"]


class ConfigError(ValueError):
    """A bad config value. `key` is the dotted path of the offending field (e.g. `model.moe.top_k`)."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}")
        self.key = key
        self.message = message

    def line(self) -> str:
        """The one line the command line prints."""
        return f"config error: {self.key}: {self.message}".replace("\n", " ")


class TrainingFailed(RuntimeError):
    """The run cannot continue (diverged, already being trained, or a checkpoint it must resume from is unusable)."""


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be used: unreadable, or written by an incompatible config."""


class Interrupted(BaseException):
    """SIGINT/SIGTERM while the run starts or compiles: stop at once instead of after compiling. A BaseException
    (like KeyboardInterrupt), so no `except Exception` on the way swallows it."""
