"""Orbax checkpoints of the whole training state: arrays in one item, JSON metadata (step, sampler, ...) in another.

Layout: <checkpoint.dir>/<run id>/<step>/{state,meta}. The meta item carries the config fingerprint, so a
checkpoint from an incompatible config is refused with the differing keys named, before any array is read.
Retention: the newest `keep_last` plus every step that is a multiple of `keep_every`, forever.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

FORMAT_VERSION = 1


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be used: unreadable, or written by an incompatible config."""


def _diff(saved: Any, current: Any, path: str = "") -> list[str]:
    """Dotted keys where two JSON-like trees differ, with both values (shortened)."""
    if isinstance(saved, dict) and isinstance(current, dict):
        out = []
        for k in sorted(set(saved) | set(current), key=str):
            sub = f"{path}.{k}" if path else str(k)
            if k not in saved:
                out.append(f"{sub}: not in checkpoint, config has {current[k]!r}"[:200])
            elif k not in current:
                out.append(f"{sub}: checkpoint has {saved[k]!r}, not in config"[:200])
            else:
                out.extend(_diff(saved[k], current[k], sub))
        return out
    if saved != current:
        return [f"{path}: checkpoint has {saved!r}, config has {current!r}"[:200]]
    return []


def to_json(x: Any) -> Any:
    """numpy scalars/arrays and tuples to plain JSON types (sampler states may hold them)."""
    if isinstance(x, dict):
        return {str(k): to_json(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [to_json(v) for v in x]
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, np.generic):
        return x.item()
    return x


class Checkpoints:
    """A CheckpointManager for one run directory. `save` is async: it returns once arrays are copied off device."""

    def __init__(self, directory: str | Path, keep_last: int = 3, keep_every: int = 0, async_save: bool = True):
        self.directory = Path(directory).absolute()
        self._opts = dict(keep_last=keep_last, keep_every=keep_every, async_save=async_save)
        self._mngr = self._open()
        self.last_save: dict = {}  # timings of the last save: blocked_s, and total_s once finished

    def _open(self) -> ocp.CheckpointManager:
        o = self._opts
        options = ocp.CheckpointManagerOptions(
            max_to_keep=o["keep_last"], keep_period=o["keep_every"] or None, create=True,
            enable_async_checkpointing=o["async_save"], cleanup_tmp_directories=True)
        return ocp.CheckpointManager(self.directory, options=options, item_names=("state", "meta"))

    # ------------------------------------------------------------------------------------------ queries
    def steps(self) -> list[int]:
        return sorted(self._mngr.all_steps())

    def latest_step(self) -> int | None:
        return self._mngr.latest_step()

    def read_meta(self, step: int) -> dict:
        try:
            out = self._mngr.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))
            meta = out["meta"]
        except Exception as e:
            raise CheckpointError(f"checkpoint {self.directory / str(step)} is unreadable (meta): "
                                  f"{type(e).__name__}: {str(e)[:300]}") from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT_VERSION:
            raise CheckpointError(f"checkpoint {self.directory / str(step)}: unknown meta format "
                                  f"{meta.get('format') if isinstance(meta, dict) else type(meta).__name__!r}")
        return meta

    def check_compatible(self, step: int, fingerprint: dict) -> dict:
        """Read a checkpoint's meta and raise CheckpointError naming every key where its config differs."""
        meta = self.read_meta(step)
        diffs = _diff(meta.get("fingerprint", {}), to_json(fingerprint))
        if diffs:
            raise CheckpointError(f"checkpoint {self.directory / str(step)} was written by an incompatible "
                                  f"config: " + "; ".join(diffs[:8]) + ("; ..." if len(diffs) > 8 else ""))
        return meta

    # ------------------------------------------------------------------------------------------ save / restore
    def save(self, step: int, state: Any, meta: dict) -> float:
        """Start saving; returns the seconds the caller was blocked (waiting for the previous save included)."""
        t0 = time.perf_counter()
        meta = {"format": FORMAT_VERSION, "step": int(step), "saved_at": time.time(), **to_json(meta)}
        self._mngr.save(int(step), args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                                          meta=ocp.args.JsonSave(meta)), force=True)
        blocked = time.perf_counter() - t0
        self.last_save = {"step": int(step), "blocked_s": blocked, "started": t0}
        return blocked

    def wait(self) -> float | None:
        """Block until the pending save is on disk; returns its total write time (None if none was pending)."""
        self._mngr.wait_until_finished()
        if self.last_save and "total_s" not in self.last_save:
            self.last_save["total_s"] = time.perf_counter() - self.last_save["started"]
            return self.last_save["total_s"]
        return None

    def restore(self, step: int, abstract_state: Any, fingerprint: dict) -> tuple[Any, dict]:
        """Restore (state, meta) of `step` into the structure of `abstract_state` after a compatibility check."""
        meta = self.check_compatible(step, fingerprint)
        try:
            out = self._mngr.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract_state)))
        except Exception as e:
            raise CheckpointError(f"checkpoint {self.directory / str(step)} is unreadable (state): "
                                  f"{type(e).__name__}: {str(e)[:300]}") from None
        _check_shapes(out["state"], abstract_state, self.directory / str(step))
        return out["state"], meta

    def set_aside_after(self, step: int) -> list[int]:
        """Move checkpoints newer than `step` into `abandoned-<time>/` (a rollback's discarded branch)."""
        self.wait()
        newer = [s for s in self.steps() if s > step]
        if not newer:
            return []
        dest = self.directory / f"abandoned-{int(time.time() * 1000)}"
        dest.mkdir(parents=True)
        for s in newer:
            shutil.move(str(self.directory / str(s)), str(dest / str(s)))
        self._mngr.reload()
        return newer

    def close(self) -> None:
        self._mngr.wait_until_finished()
        self._mngr.close()


def _check_shapes(restored: Any, abstract: Any, where: Path) -> None:
    bad = []

    def visit(path, r, a):
        if getattr(r, "shape", None) != getattr(a, "shape", None) or \
                np.dtype(getattr(r, "dtype", None)) != np.dtype(getattr(a, "dtype", None)):
            bad.append(f"{jax.tree_util.keystr(path)}: checkpoint {getattr(r, 'shape', '?')} "
                       f"{getattr(r, 'dtype', '?')}, expected {a.shape} {a.dtype}")

    jax.tree_util.tree_map_with_path(visit, restored, abstract)
    if bad:
        raise CheckpointError(f"checkpoint {where} does not match the model: " + "; ".join(bad[:5]))


def abstract(tree: Any) -> Any:
    return jax.tree.map(ocp.utils.to_shape_dtype_struct, tree)


def set_aside_run(directory: str | Path) -> Path | None:
    """`--fresh`: move a run's old checkpoints to `<dir>.replaced-<time>` instead of deleting them."""
    d = Path(directory)
    if not d.exists() or not any(d.iterdir()):
        return None
    dest = d.with_name(f"{d.name}.replaced-{int(time.time())}")
    d.rename(dest)
    return dest
