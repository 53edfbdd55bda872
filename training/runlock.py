"""One trainer per run: an exclusive flock beside the run's checkpoint directory, held for the process's life."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO

from training.errors import TrainingFailed


def lock_run(ck_dir: Path) -> IO:
    """Take the run's lock or raise TrainingFailed naming the holder. The kernel drops it if the process dies."""
    ck_dir.parent.mkdir(parents=True, exist_ok=True)
    f = open(ck_dir.parent / f"{ck_dir.name}.lock", "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        holder = f.read().strip() or "another process"
        f.close()
        raise TrainingFailed(f"run {ck_dir.name!r} is already being trained ({holder}); stop it first") from None
    f.seek(0)
    f.truncate()
    f.write(f"pid {os.getpid()}\n")
    f.flush()
    return f
