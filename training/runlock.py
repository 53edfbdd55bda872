"""Process-level helpers of the trainer: one trainer per run, the last step on the stream, the compile cache."""

from __future__ import annotations

import os
from pathlib import Path

import jax


class TrainingFailed(RuntimeError):
    """The run cannot continue (diverged, or a checkpoint it must resume from is unusable)."""


def _lock_run(ck_dir: Path):
    """One trainer per run: an flock next to the checkpoint dir (the kernel drops it if the process dies)."""
    import fcntl

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


def last_published_step(redis_url: str | None, run_id: str, scan: int = 5000) -> int | None:
    """The step of the newest metrics entry on the run's telemetry stream (None if unknown or unreachable)."""
    if not redis_url:
        return None
    import json

    import redis as redis_lib
    from observatory import contract

    try:
        r = redis_lib.Redis.from_url(redis_url, socket_timeout=2, socket_connect_timeout=1)
        hi, seen = "+", 0
        while seen < scan:
            page = r.xrevrange(contract.telemetry_stream(run_id), max=hi, min="-", count=500)
            if not page:
                return None
            for eid, f in page:
                if f.get(b"kind") == b"metrics":
                    return int(json.loads(f[b"data"])["step"])
            seen += len(page)
            last = page[-1][0].decode()
            ms, seq = last.split("-")
            hi = f"{ms}-{int(seq) - 1}" if int(seq) > 0 else f"{int(ms) - 1}-18446744073709551615"
        return None
    except Exception:
        return None


def enable_compilation_cache(path: str) -> None:
    """Persist compiled programs so a restart (resume after a crash) does not pay the compile again.

    $JAX_COMPILATION_CACHE_DIR, when set, wins. The cached executable is the same program, so resumes stay exact.
    """
    if not path or os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        return
    path = str(Path(path).absolute())
    if jax.config.jax_compilation_cache_dir == path:
        return
    from jax.experimental.compilation_cache import compilation_cache

    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    compilation_cache.reset_cache()  # in case something compiled before the directory was set
