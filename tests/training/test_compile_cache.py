"""The persistent compilation cache: every program is written (however quick to compile), also when
$JAX_COMPILATION_CACHE_DIR chooses the directory, and a second compile of the same program is a counted hit."""

from __future__ import annotations

import os
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from jax.experimental.compilation_cache import compilation_cache

from training.compile_cache import CacheCounter, enable_compilation_cache

ROOT = Path(__file__).resolve().parents[2]
_KEYS = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs",
         "jax_persistent_cache_min_entry_size_bytes")


@pytest.fixture
def restore_jax_config():
    before = {k: getattr(jax.config, k) for k in _KEYS}
    yield
    for k, v in before.items():
        jax.config.update(k, v)
    compilation_cache.reset_cache()


@pytest.mark.parametrize("via_env", [False, True])
def test_a_small_program_compiled_again_is_read_from_the_cache(tmp_path, monkeypatch, restore_jax_config, via_env):
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)  # JAX's default
    if via_env:
        monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(tmp_path / "env-cache"))
    else:
        monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
    enable_compilation_cache(str(tmp_path / "cache"))
    assert jax.config.jax_persistent_cache_min_compile_time_secs == 0.0
    assert jax.config.jax_compilation_cache_dir == str(tmp_path / ("env-cache" if via_env else "cache"))
    x = jnp.ones(7)
    counter = CacheCounter().start()
    try:
        f = jax.jit(lambda v: jnp.sin(v) * 3.0 + float(via_env))
        f(x).block_until_ready()
        first = counter.snapshot()
        assert first["cache_requests"] >= 1 and first["cache_hits"] == 0
        jax.clear_caches()  # as a new process would: only the persistent cache remains
        f(x).block_until_ready()
        again = counter.snapshot()  # every program looked up again was found
        assert again["cache_hits"] == again["cache_requests"] - first["cache_requests"] >= 1
    finally:
        counter.stop()


def test_the_training_tests_compile_into_the_shared_cache():
    """tests/training/conftest.py: what this test process compiles persists in the checkout's var/jax-cache (or
    $JAX_COMPILATION_CACHE_DIR), however quick, so a later run or another xdist worker reads it instead."""
    want = os.environ.get("JAX_COMPILATION_CACHE_DIR") or str(ROOT / "var" / "jax-cache")
    assert jax.config.jax_compilation_cache_dir == str(Path(want).absolute())
    assert jax.config.jax_persistent_cache_min_compile_time_secs == 0.0
    assert jax.config.jax_persistent_cache_min_entry_size_bytes == 0
