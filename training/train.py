"""The training loop: data -> jitted step -> metrics one step late -> sinks, with checkpoints and operator commands.

Side effects live here; `training.step` stays pure. At each step boundary the loop applies queued operator
commands, saves a checkpoint when one is due, then dispatches the next step and publishes the previous step's
metrics while the device computes (so the device never waits on logging).
"""

from __future__ import annotations

import math
import os
import signal
import time
import traceback
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import jax
import numpy as np

from training import checkpoint as ckpt_lib
from training import control as control_lib
from training import step as step_lib
from training import telemetry
from training.config import RunConfig
from training.data import build_sampler
from training.errors import ConfigError
from training.heartbeat import Heartbeat, Progress
from training.model import counts, make_mesh
from training.schedule import Schedule, ScheduleConfig
from training.sinks import CompositeSink, JsonlSink, Sink, WandbSink


class TrainingFailed(RuntimeError):
    """The run cannot continue (diverged, or a checkpoint it must resume from is unusable)."""


@dataclass
class Faults:
    """Injected faults still in effect, in steps (part of the checkpoint, so a resume replays them exactly)."""
    lr_steps: int = 0
    lr_factor: float = 1.0
    nan_steps: int = 0
    stall_s: float = 0.0

    def to_dict(self) -> dict:
        return dict(lr_steps=self.lr_steps, lr_factor=self.lr_factor, nan_steps=self.nan_steps, stall_s=self.stall_s)


def _np_tree(d: dict) -> dict:
    """numpy scalars to 0-d arrays: orbax restores arrays into a template, not numpy scalar types."""
    return {k: (_np_tree(v) if isinstance(v, dict) else np.asarray(v)) for k, v in d.items()}


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


class Trainer:
    def __init__(self, cfg: RunConfig, run_id: str | None = None, *, redis_url: str | None = None,
                 fresh: bool = False, metrics_jsonl: str | None = None, sinks: list[Sink] | None = None,
                 log=print):
        self.cfg = cfg
        self.run_id = run_id or cfg.run.name
        self.redis_url = redis_url if cfg.sinks.redis else None
        self.fresh = fresh
        self.log = log
        enable_compilation_cache(cfg.run.compile_cache)
        self.tokens_per_step = cfg.train.batch_size * cfg.model.seq_len
        self.total_steps = max(1, math.ceil(cfg.train.token_budget / self.tokens_per_step))
        self.progress = Progress(cfg.train.token_budget, self.tokens_per_step)
        self.redis_sink = None
        all_sinks = list(sinks or [])
        if self.redis_url:
            from training.redis_sink import RedisSink
            self.redis_sink = RedisSink(self.redis_url, self.run_id)
            all_sinks.append(self.redis_sink)
        jsonl = metrics_jsonl or cfg.sinks.jsonl
        if jsonl:
            all_sinks.append(JsonlSink(jsonl))
        if cfg.sinks.wandb != "off":
            all_sinks.append(WandbSink(cfg.sinks.wandb_project, self.run_id, cfg.to_dict(), dir=cfg.sinks.wandb_dir,
                                       name=cfg.run.name, mode=cfg.sinks.wandb))
        self.sink = CompositeSink(all_sinks)
        self.heartbeat = Heartbeat(self.progress, lambda snap: self.sink.record("heartbeat", snap),
                                   cfg.sinks.heartbeat_s)
        self.step = 0
        self.faults = Faults()
        self.paused = False
        self.stop_reason: str | None = None
        self.applied_ids: set[str] = set()
        self.last_published = None  # newest step whose metrics went to the sinks
        self.nonfinite_run = 0
        self.control = None
        self.hw = telemetry.HardwareMonitor(interval_s=1.0)
        self._hw_published_at = 0.0
        self._last_ckpt_t = time.monotonic()
        self._ckpt_pending_write = None  # (step, t0) of an async save still being written
        self._timer_reset = True

    # ------------------------------------------------------------------------------------------ publishing
    def _state(self, state: str, detail: str = "") -> None:
        self.progress.phase = state
        self.sink.record("state", {"t": time.time(), "state": state, "step": int(self.step), "detail": detail})
        self.log(f"[{self.run_id}] {state} step={self.step} {detail}".rstrip())

    def _event(self, name: str, payload: dict) -> None:
        self.sink.event(name, int(self.step), ckpt_lib.to_json(payload))

    # ------------------------------------------------------------------------------------------ setup
    def _setup(self) -> None:
        cfg = self.cfg
        self.sampler = build_sampler(cfg.data.to_data_config(), cfg.model.seq_len, cfg.train.batch_size,
                                     cfg.run.seed, cfg.train.token_budget)
        self.domain_names = list(self.sampler.domain_names)
        t = cfg.train
        self.schedule = Schedule(ScheduleConfig(peak_lr=t.lr, kind=t.schedule, warmup_fraction=t.warmup_ratio,
                                                min_lr_ratio=t.min_lr_ratio, decay_fraction=t.decay_ratio),
                                 self.total_steps)
        self.mesh = make_mesh(cfg.model)
        ck_dir = Path(cfg.checkpoint.dir) / self.run_id
        self._lock = _lock_run(ck_dir)
        if self.fresh:
            moved = ckpt_lib.set_aside_run(ck_dir)
            if moved:
                self.log(f"[{self.run_id}] --fresh: previous checkpoints moved to {moved}")
        self.ckpt = ckpt_lib.Checkpoints(ck_dir, cfg.checkpoint.keep_last, cfg.checkpoint.keep_every,
                                         cfg.checkpoint.async_save)
        latest = self.ckpt.latest_step()
        if latest is not None:  # fail fast, before building the model, on an incompatible checkpoint
            try:
                self.ckpt.check_compatible(latest, cfg.fingerprint())
            except ckpt_lib.CheckpointError as e:
                raise TrainingFailed(f"{e} -- nothing was overwritten; fix the config, or start over with "
                                     f"--fresh (old checkpoints are moved aside, not deleted)") from None
        # One jitted program instead of dozens of eager ops (and it lands in the compilation cache).
        state = jax.jit(partial(step_lib.init_state, cfg))(jax.random.PRNGKey(cfg.run.seed))
        # Committed like a restored state, so a fresh start and a resume lower to the very same program
        # (same compilation-cache entry, same numerics).
        self.state = jax.tree.map(lambda x: jax.device_put(x, x.sharding), state)
        self.sink.record("manifest", {"t": time.time(), "manifest": self.sampler.manifest()})
        prev = last_published_step(self.redis_url, self.run_id)
        if latest is not None:
            self._restore(latest)
            self._event("resumed", {"from_checkpoint": latest, "directory": str(self.ckpt.directory)})
        if prev is not None or latest is not None:
            to = self.step
            self.sink.record("rewind", {"t": time.time(), "from_step": max(prev or 0, to), "to_step": to})
        self.progress.stepped(self.step, self.sampler.tokens_seen)
        self.progress.token_budget = int(self.sampler.token_budget)

    def _ckpt_tree(self) -> dict:
        return {"train": self.state, "sampler": _np_tree(self.sampler.state_dict()),
                "schedule": _np_tree(self.schedule.state_dict())}

    def _restore(self, step: int) -> None:
        abstract = ckpt_lib.abstract(self._ckpt_tree())
        try:
            tree, meta = self.ckpt.restore(step, abstract, self.cfg.fingerprint())
        except ckpt_lib.CheckpointError as e:
            raise TrainingFailed(f"{e} -- nothing was overwritten; fix the config, or start over with --fresh "
                                 f"(old checkpoints are moved aside, not deleted)") from None
        self.state = tree["train"]
        self.sampler.load_state_dict(tree["sampler"])
        self.schedule.load_state_dict(tree["schedule"])
        self.step = int(meta["step"])
        self.faults = Faults(**meta.get("faults", {}))
        self.nonfinite_run = int(meta.get("nonfinite_run", 0))
        self.applied_ids |= set(meta.get("applied_ids", []))
        self.progress.token_budget = int(self.sampler.token_budget)
        self.log(f"[{self.run_id}] restored checkpoint step {step} from {self.ckpt.directory}")

    def _compile(self) -> None:
        self._state("compiling")
        t0 = time.perf_counter()
        fn = step_lib.jit_train_step(self.cfg, len(self.domain_names), self.mesh)
        B, L = self.cfg.train.batch_size, self.cfg.model.seq_len
        self.step_fn = fn.lower(self.state, np.zeros((B, L + 1), np.int32), np.zeros((B,), np.int32),
                                np.float32(0), np.float32(1)).compile()
        secs = time.perf_counter() - t0
        c = counts(self.cfg.model)
        dev = jax.devices()
        peak, how = telemetry.peak_flops(dev[0].device_kind, len(dev), self.cfg.train.peak_flops or None)
        self.timer = telemetry.StepTimer(self.tokens_per_step, c["flops_per_token"], peak)
        self._event("compiled", {"seconds": secs, **c, "peak_flops": peak, "peak_flops_source": how,
                                 "devices": f"{len(dev)} x {dev[0].device_kind}"})

    # ------------------------------------------------------------------------------------------ checkpoints
    def save_checkpoint(self, wait: bool = False, why: str = "periodic") -> dict:
        if self.step in self.ckpt.steps():
            return {"step": self.step, "skipped": "already saved at this step"}
        self._state("checkpointing", why)
        meta = {"run_id": self.run_id, "tokens": self.sampler.tokens_seen, "fingerprint": self.cfg.fingerprint(),
                "config": self.cfg.to_dict(), "applied_ids": sorted(self.applied_ids), "faults": self.faults.to_dict(),
                "nonfinite_run": self.nonfinite_run}
        self._poll_checkpoint_write(block=True)
        blocked = self.ckpt.save(self.step, self._ckpt_tree(), meta)
        info = {"step": self.step, "blocked_s": blocked, "why": why, "directory": str(self.ckpt.directory)}
        self._ckpt_pending_write = (self.step, time.perf_counter() - blocked)
        if wait or not self.cfg.checkpoint.async_save:
            info.update(self._poll_checkpoint_write(block=True) or {})
        self._last_ckpt_t = time.monotonic()
        self._event("checkpoint_saved", info)
        self._state("paused" if self.paused else "training")
        self.progress.reset_rate()
        self._timer_reset = True  # the save is not part of the next step's time
        return info

    def _poll_checkpoint_write(self, block: bool = False) -> dict | None:
        """When the async write finished, publish how long it took in total."""
        if self._ckpt_pending_write is None:
            return None
        if not block and self.ckpt._mngr.is_saving_in_progress():
            return None
        self.ckpt.wait()
        step, t0 = self._ckpt_pending_write
        self._ckpt_pending_write = None
        info = {"step": step, "write_s": time.perf_counter() - t0}
        self._event("checkpoint_written", info)
        return info

    def _checkpoint_due(self) -> bool:
        c = self.cfg.checkpoint
        if c.every_steps and self.step % c.every_steps == 0:
            return True
        return bool(c.every_minutes) and time.monotonic() - self._last_ckpt_t >= 60 * c.every_minutes

    # ------------------------------------------------------------------------------------------ one step
    def _dispatch(self):
        if self._timer_reset:
            self.timer.start()
            self._timer_reset = False
        batch = self.sampler.next_batch()
        self.timer.mark("data")
        f = self.faults
        lr = self.schedule.lr(self.step) * (f.lr_factor if f.lr_steps > 0 else 1.0)
        injected = f.nan_steps > 0 or f.lr_steps > 0
        scale = math.nan if f.nan_steps > 0 else 1.0
        f.lr_steps, f.nan_steps = max(0, f.lr_steps - 1), max(0, f.nan_steps - 1)
        host = {**self.sampler.metrics(), "optim/lr_multiplier": self.schedule.multiplier,
                "optim/total_steps": float(self.schedule.total_steps),
                "throughput/total_tokens": float(self.sampler.tokens_seen)}
        if injected:
            host["fault/active"] = 1.0
        self.state, metrics = self.step_fn(self.state, batch.tokens_BxL, batch.domain_ids_B, np.float32(lr),
                                           np.float32(scale))
        self.step += 1
        return self.step, metrics, host, f.nan_steps > 0 or scale != 1.0

    def _complete(self, pending) -> None:
        step, metrics, host, injected_nan = pending
        m = jax.device_get(metrics)
        self.timer.mark("compute")
        values = step_lib.to_host_metrics(m, self.domain_names)
        values.update(host)
        values.update(self.timer.end())
        now = time.monotonic()
        if now - self._hw_published_at >= self.hw.interval_s:
            values.update(self.hw.latest())
            self._hw_published_at = now
        if self.redis_sink is not None:
            st = self.redis_sink.stats()
            values["sys/publish_dropped"] = float(st["dropped"])
            values["sys/publish_queue"] = float(st["queue_depth"])
        self.sink.log(values, step)
        self.last_published = step
        # Progress counts completed steps: completions are paced by the device, dispatches are not.
        self.progress.stepped(step, int(host["throughput/total_tokens"]))
        if values["train/finite"] < 1:
            if not injected_nan:
                self.nonfinite_run += 1
            if self.nonfinite_run >= self.cfg.train.max_nonfinite_steps:
                raise TrainingFailed(f"loss or gradient non-finite for {self.nonfinite_run} consecutive steps "
                                     f"(last: step {step}, loss {values['train/loss']}); updates were skipped. "
                                     f"Roll back to a checkpoint or lower the LR.")
        else:
            self.nonfinite_run = 0

    # ------------------------------------------------------------------------------------------ commands
    def _apply_commands(self, cmds) -> None:
        for cmd in cmds:
            if cmd.id in self.applied_ids:  # restored from a checkpoint's list after the reader saw it
                self.control.applied(cmd, "duplicate id: already applied, not applied again", self.step)
                continue
            self.applied_ids.add(cmd.id)  # before applying: a stop/checkpoint saves the id with the state
            try:
                detail = self._apply(cmd)
            except (control_lib.CommandError, ConfigError, ValueError) as e:
                self.applied_ids.discard(cmd.id)
                self.control.rejected(cmd, str(e), self.step)
                continue
            self.control.applied(cmd, detail, self.step)
            self._event("command", {"id": cmd.id, "command": cmd.name, "args": cmd.args, "reason": cmd.reason,
                                    "user": cmd.user, "detail": detail})

    def _apply(self, cmd) -> str:
        name, a = cmd.name, cmd.args
        if name == "pause":
            if self.paused:
                raise control_lib.CommandError("already paused")
            self.paused = True
            self._state("paused", f"by {cmd.user or 'operator'}: {cmd.reason}")
            return f"paused at step {self.step}"
        if name == "resume":
            if not self.paused:
                raise control_lib.CommandError("not paused")
            self.paused = False
            self.progress.reset_rate()
            self._timer_reset = True
            self._state("training", f"resumed by {cmd.user or 'operator'}")
            return f"resumed at step {self.step}"
        if name == "stop":
            self.stop_reason = f"stop command {cmd.id}: {cmd.reason}"
            info = self.save_checkpoint(wait=True, why="stop")
            return f"checkpoint at step {info['step']} written; exiting"
        if name == "checkpoint":
            info = self.save_checkpoint(wait=True, why=f"command {cmd.id}")
            if "skipped" in info:
                return f"checkpoint at step {self.step} already exists"
            return (f"checkpoint at step {info['step']}: loop blocked {info['blocked_s']:.3f} s, written in "
                    f"{info.get('write_s', 0):.3f} s")
        if name == "rollback":
            return self._rollback(a["step"], a["skip_batches"])
        if name == "set-lr-multiplier":
            p = self.schedule.set_multiplier(a["value"])
            self._event("lr_multiplier", p)
            return f"LR multiplier {p['old']:g} -> {p['new']:g}; LR now {self.schedule.lr(self.step):.3g}"
        if name == "set-token-budget":
            tokens = a["tokens"]
            if tokens <= self.sampler.tokens_seen:
                raise control_lib.CommandError(f"new budget {tokens} must exceed tokens seen "
                                               f"({self.sampler.tokens_seen})")
            new_total = max(self.step + 1, math.ceil(tokens / self.tokens_per_step))
            p = self.schedule.replan(self.step, new_total)
            p["data"] = self.sampler.set_token_budget(tokens)
            self.progress.token_budget = tokens
            self._event("lr_replan", p)
            return (f"token budget {p['data']['old_budget']} -> {tokens}; decay re-planned to step {new_total}, "
                    f"LR {p['lr_before']:.3g} -> {p['lr_after']:.3g} at step {self.step}")
        if name == "set-mixture":
            p = self.sampler.set_weights(a["weights"])
            self._event("mixture_changed", p)
            return f"stage {p['stage']} mixture now " + ", ".join(f"{k}={v:.3g}" for k, v in p["new"].items())
        if name == "inject-fault":
            if not self.cfg.train.allow_faults:
                raise control_lib.CommandError("fault injection is disabled for this run (train.allow_faults)")
            fault, n = a["fault"], a["steps"]
            if fault == "lr-spike":
                self.faults.lr_steps, self.faults.lr_factor = n, a["factor"]
            elif fault == "nan":
                self.faults.nan_steps = n
            else:
                self.faults.stall_s = a["seconds"]
            self._event("fault_injected", {"fault": fault, **a})
            return f"{fault} injected from step {self.step + 1}" + (f" for {n} steps" if fault != "stall" else "")
        raise control_lib.CommandError(f"unknown command {name!r}")

    def _rollback(self, target: int, skip: int) -> str:
        steps = self.ckpt.steps()
        if target not in steps:
            raise control_lib.CommandError(f"no checkpoint at step {target} (available: {steps})")
        self._poll_checkpoint_write(block=True)
        from_step = max(self.last_published or 0, self.step, target)
        keep_ids = set(self.applied_ids)
        try:
            self._restore(target)  # assigns nothing unless the whole checkpoint reads back
        except TrainingFailed as e:
            raise control_lib.CommandError(f"cannot roll back: {e}") from None
        self.applied_ids |= keep_ids
        if skip:
            self.sampler.skip(skip)
        aside = self.ckpt.set_aside_after(target)
        self.last_published = target
        self.sink.record("rewind", {"t": time.time(), "from_step": from_step, "to_step": target})
        self._event("rollback", {"from_step": from_step, "to_step": target, "skip_batches": skip,
                                 "set_aside": aside})
        self.progress.stepped(self.step, self.sampler.tokens_seen)
        self.progress.reset_rate()
        self._timer_reset = True
        self._last_ckpt_t = time.monotonic()
        return (f"rolled back to step {target}" + (f", skipping {skip} batches" if skip else "")
                + (f"; newer checkpoints {aside} set aside" if aside else ""))

    # ------------------------------------------------------------------------------------------ main loop
    def _boundary(self, pending):
        """Commands, pause, checkpoint; returns the (possibly completed) pending step."""
        cmds = self.control.poll() if self.control else []
        if cmds:
            if pending:
                self._complete(pending)
                pending = None
            self._apply_commands(cmds)
        while self.paused and not self.stop_reason:
            cmds = self.control.wait(0.25) if self.control else (time.sleep(0.25) or [])
            self._apply_commands(cmds)
        self._poll_checkpoint_write()
        if not self.stop_reason and self._checkpoint_due():
            if pending:
                self._complete(pending)
                pending = None
            self.save_checkpoint()
        if self.faults.stall_s > 0:
            stall, self.faults.stall_s = self.faults.stall_s, 0.0
            end = time.monotonic() + stall
            while time.monotonic() < end and not self.stop_reason:
                time.sleep(0.05)
        return pending

    def _finished(self) -> str | None:
        if self.stop_reason:
            return self.stop_reason
        if self.cfg.run.steps and self.step >= self.cfg.run.steps:
            return f"reached run.steps ({self.cfg.run.steps})"
        if self.sampler.tokens_seen >= self.sampler.token_budget:
            return f"token budget reached ({self.sampler.token_budget} tokens)"
        return None

    def run(self) -> int:
        """Train until done. Returns the process exit status: 0 stopped cleanly, 1 failed.

        A ConfigError found only at start-up (a corpus directory, a data domain) is published, then raised.
        """
        self.sink.record("run", {"t": time.time(), "name": self.cfg.run.name, "run_id": self.run_id,
                                 "config": self.cfg.to_dict(), "started_at": time.time(), "pid": os.getpid(),
                                 "counts": counts(self.cfg.model)})
        self._state("starting")
        self.heartbeat.start()
        self.hw.start()
        pending = None
        try:
            self._setup()
            if self.redis_url:
                self.control = control_lib.ControlChannel(self.redis_url, self.run_id,
                                                          applied_ids=self.applied_ids).start()
            self._compile()
            self._state("training", f"step {self.step} of {self.schedule.total_steps} planned")
            while True:
                pending = self._boundary(pending)
                why = self._finished()
                if why:
                    break
                nxt = self._dispatch()
                if pending:
                    self._complete(pending)
                pending = nxt
            if pending:
                self._complete(pending)
                pending = None
            if self.step not in self.ckpt.steps():
                self.save_checkpoint(wait=True, why="final")
            self._poll_checkpoint_write(block=True)
            self._state("stopped", why)
            return 0
        except ConfigError as e:  # e.g. a corpus directory that does not exist: the CLI exits 2
            self._state("failed", f"config error: {e.key}: {e.message}")
            raise
        except Exception as e:
            tb = traceback.format_exc()
            self._state("failed", f"{type(e).__name__}: {e}\n" + "".join(tb.splitlines(True)[-12:])[-3000:])
            return 1
        finally:
            self._shutdown()

    def request_stop(self, why: str) -> None:
        self.stop_reason = why

    def _shutdown(self) -> None:
        self.heartbeat.stop()
        self.heartbeat.beat()  # the final phase (stopped or failed) reaches the heartbeat key at once
        self.hw.stop()
        if self.control:
            self.control.close()
        try:
            if hasattr(self, "ckpt"):
                self.ckpt.close()
        except Exception as e:
            self.log(f"[{self.run_id}] checkpoint close failed: {e}")
        if getattr(self, "_lock", None) is not None:
            self._lock.close()  # releases the flock once the last write is on disk
        if self.redis_sink is not None:
            st = self.redis_sink.stats()
            self.log(f"[{self.run_id}] publisher: {st['published']} published, {st['dropped']} dropped, "
                     f"{st['reconnects']} reconnects")
        self.sink.finish()


def install_signal_handlers(trainer: Trainer) -> None:
    """SIGINT/SIGTERM: checkpoint at the next step boundary and exit 0; a signal 3 s later exits at once."""
    first: list[float] = []

    def handler(signum, frame):
        # Ctrl-C under a supervisor arrives twice (terminal + supervisor): only a later signal means "now".
        if first and time.monotonic() - first[0] > 3:
            os._exit(130)
        if not first:
            first.append(time.monotonic())
            trainer.request_stop(f"signal {signal.Signals(signum).name}")
            trainer.paused = False

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
