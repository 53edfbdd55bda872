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
from training.commands import CommandsMixin
from training.config import RunConfig
from training.data import build_sampler
from training.errors import ConfigError
from training.heartbeat import Heartbeat, Progress
from training.model import counts, make_mesh
from training.runtime import TrainingFailed, _lock_run, enable_compilation_cache, last_published_step
from training.schedule import Schedule, ScheduleConfig
from training.sinks import CompositeSink, JsonlSink, Sink, WandbSink


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


class Trainer(CommandsMixin):
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
            self._forget_commands_lost_with_the_crash(latest)
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
