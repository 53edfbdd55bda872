"""The persistent XLA compilation cache: a restart (resume after a crash) does not pay the compile again."""

from __future__ import annotations

import os
from pathlib import Path

import jax
import jax.monitoring

_HIT, _REQUEST = "/jax/compilation_cache/cache_hits", "/jax/compilation_cache/compile_requests_use_cache"


def enable_compilation_cache(path: str) -> None:
    """Cache compiled programs under `path` ("" = off). $JAX_COMPILATION_CACHE_DIR, when set, wins.

    Every program is written, however small or quick to compile (JAX's defaults skip those under 1 s of compile:
    on a loaded CPU the many small ones add up). The cached executable is the same program, so resumes stay exact.
    """
    path = os.environ.get("JAX_COMPILATION_CACHE_DIR") or path
    if not path:
        return
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    path = str(Path(path).absolute())
    if jax.config.jax_compilation_cache_dir == path:
        return
    from jax.experimental.compilation_cache import compilation_cache

    jax.config.update("jax_compilation_cache_dir", path)
    compilation_cache.reset_cache()  # in case something compiled before the directory was set


class CacheCounter:
    """Counts this process's persistent-cache lookups and hits while started (what the `compiled` event reports)."""

    def __init__(self):
        self.requests = self.hits = 0

    def _on(self, event: str, **_) -> None:
        if event == _REQUEST:
            self.requests += 1
        elif event == _HIT:
            self.hits += 1

    def start(self) -> "CacheCounter":
        jax.monitoring.register_event_listener(self._on)
        return self

    def stop(self) -> None:
        try:
            jax.monitoring.unregister_event_listener(self._on)
        except (AssertionError, ValueError):  # not registered
            pass

    def snapshot(self) -> dict:
        return {"cache_requests": self.requests, "cache_hits": self.hits}
