"""Orbax checkpoints of the whole training state, and the loop's checkpoint hook (when to save, async writes).

Layout: <checkpoint.dir>/<run id>/<step>/{state,meta}: arrays in one item, JSON metadata (step, applied command
ids, faults, config fingerprint) in the other. A checkpoint from an incompatible config is refused with the
differing keys named, before any array is read. Retention is training.retention's policy, applied here once a
write is on disk (orbax keeps everything itself); `entries()` lists what is kept and why, which the loop
publishes for operators (`list-checkpoints`, the operator panel).
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any, Callable

import jax
import numpy as np
import orbax.checkpoint as ocp

from training.config import CheckpointSection
from training.errors import CheckpointError
from training.retention import Entry, Retention, kind_of

FORMAT_VERSION = 1


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

    def __init__(self, directory: str | Path, keep_last: int = 3, keep_every: int = 0, async_save: bool = True,
                 policy: Retention | None = None):
        self.directory = Path(directory).absolute()
        self.policy = policy or Retention(keep_last=keep_last, keep_every=keep_every)
        self._async = async_save
        self._mngr = self._open()
        self._writing: tuple[int, float] | None = None  # (step, start) of a save not yet known to be on disk
        self._info: dict[int, dict] = {}  # step -> {"why", "saved_at", "bytes"}: read once per checkpoint

    def _open(self) -> ocp.CheckpointManager:
        # Orbax keeps every checkpoint; `prune()` applies our policy, which knows why each one was taken.
        options = ocp.CheckpointManagerOptions(max_to_keep=None, create=True,
                                               enable_async_checkpointing=self._async, cleanup_tmp_directories=True)
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
        self._writing = (int(step), t0)
        self._info[int(step)] = {"why": str(meta.get("why", "periodic")), "saved_at": meta["saved_at"]}
        return time.perf_counter() - t0

    @property
    def unreported(self) -> bool:
        """A save was started and `wait()` has not yet reported it finished."""
        return self._writing is not None

    def saving(self) -> bool:
        return self._mngr.is_saving_in_progress()

    def wait(self) -> dict | None:
        """Block until the last save is on disk: {"step", "write_s"} the first time it is seen finished, else None."""
        self._mngr.wait_until_finished()
        if self._writing is None:
            return None
        (step, t0), self._writing = self._writing, None
        info = {"step": step, "write_s": time.perf_counter() - t0}
        pruned = self.prune()
        if pruned:
            info["pruned"] = sorted(pruned)
        return info

    # ------------------------------------------------------------------------------------------ retention
    def _described(self, step: int) -> dict:
        """why/saved_at/bytes of a finished checkpoint (its meta file read directly: no orbax round trip)."""
        info = self._info.setdefault(step, {})
        if "why" not in info:
            try:
                meta = json.loads((self.directory / str(step) / "meta" / "metadata").read_text())
            except (OSError, ValueError):
                meta = {}
            info.update(why=str(meta.get("why", "periodic")), saved_at=meta.get("saved_at"))
        if "bytes" not in info:
            info["bytes"] = sum(f.stat().st_size for f in (self.directory / str(step)).rglob("*") if f.is_file())
        return info

    def entries(self) -> list[dict]:
        """Every checkpoint on disk, oldest first: step, why, kind, saved_at, bytes and why it is kept."""
        if self.saving():
            steps = [s for s in self.steps() if not self._writing or s != self._writing[0]]
        else:
            steps = self.steps()
        keep, _ = self.policy.plan([Entry(s, self._described(s)["why"], self._described(s)["bytes"])
                                    for s in steps])
        return [{"step": s, "why": self._info[s]["why"], "kind": kind_of(self._info[s]["why"]),
                 "saved_at": self._info[s].get("saved_at"), "bytes": self._info[s]["bytes"],
                 "kept": keep.get(s, "")} for s in steps]

    def prune(self) -> dict[int, str]:
        """Delete what the policy does not keep ({step: why it went}); only when no write is in flight."""
        if self.saving():
            return {}
        steps = self.steps()
        _, drop = self.policy.plan([Entry(s, self._described(s)["why"], self._described(s)["bytes"])
                                    for s in steps])
        for s in sorted(drop):
            self._mngr.delete(s)
            self._info.pop(s, None)
        return drop

    def delete(self, step: int) -> None:
        """Remove one checkpoint (to write that step again); waits for a write in flight first."""
        self._mngr.wait_until_finished()
        self._mngr.delete(step)
        self._info.pop(step, None)

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
        """Move checkpoints newer than `step` into `abandoned-<time>/` (a rollback's discarded branch).

        In a multi-process job every process calls this at the same boundary: process 0 moves the directories
        (shared storage), the others wait for it, then every process re-reads the directory."""
        from training import distributed

        self._mngr.wait_until_finished()
        newer = [s for s in self.steps() if s > step]
        if newer and jax.process_index() == 0:
            dest = self.directory / f"abandoned-{int(time.time() * 1000)}"
            dest.mkdir(parents=True)
            for s in newer:
                shutil.move(str(self.directory / str(s)), str(dest / str(s)))
        distributed.barrier(f"set-aside-after-{step}")
        for s in newer:
            self._info.pop(s, None)  # the new branch may reuse the step number
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


class Checkpointer:
    """The loop's checkpoint hook: whether a save is due, saving, and reporting when an async write lands."""

    def __init__(self, cfg: CheckpointSection, store: Checkpoints, event: Callable[[str, dict], None],
                 publish: Callable[[list[dict]], None] | None = None):
        self.cfg, self.store, self._event = cfg, store, event
        store.policy = Retention.from_section(cfg)
        self.publish = publish  # receives the checkpoint list whenever it changes (the run's Redis key)
        self._last_t = time.monotonic()
        self.publish_list()

    def publish_list(self) -> None:
        """Tell operators which checkpoints exist now (after a write landed, a prune, a rollback's set-aside)."""
        if self.publish is not None:
            self.publish(self.store.entries())

    def due(self, step: int) -> bool:
        c = self.cfg
        if c.every_steps and step % c.every_steps == 0:
            return True
        return bool(c.every_minutes) and time.monotonic() - self._last_t >= 60 * c.every_minutes

    def restart_clock(self) -> None:
        """The time-based period counts from now (after a rollback restored an older checkpoint)."""
        self._last_t = time.monotonic()

    def save(self, step: int, tree: Any, meta: dict, why: str, wait: bool) -> dict:
        self.poll(block=True)
        blocked = self.store.save(step, tree, {**meta, "why": why})
        info = {"step": step, "blocked_s": blocked, "why": why, "directory": str(self.store.directory)}
        if wait or not self.cfg.async_save:
            info.update(self.poll(block=True) or {})
        self.restart_clock()
        self._event("checkpoint_saved", info)
        return info

    def written(self) -> bool:
        """No async write in flight here (processes agree on it before reporting one: reporting prunes,
        collectively)."""
        return not self.store.saving()

    def poll(self, block: bool = False) -> dict | None:
        """When the async write finished, publish how long it took in total."""
        if not self.store.unreported or (not block and self.store.saving()):
            return None
        info = self.store.wait()
        if info is not None:
            self._event("checkpoint_written", info)
            self.publish_list()
        return info
