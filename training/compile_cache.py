"""The persistent XLA compilation cache: a restart (resume after a crash) does not pay the compile again."""

from __future__ import annotations

import os
from pathlib import Path

import jax


def enable_compilation_cache(path: str) -> None:
    """Cache compiled programs under `path` ("" = off). $JAX_COMPILATION_CACHE_DIR, when set, wins.

    The cached executable is the same program, so resumes stay exact.
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
