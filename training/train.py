"""The training loop: batch -> jitted step -> metrics one step late -> sinks, with explicit hooks between steps.

`Trainer.run()` sets up (data, schedule, device state, resume from the latest checkpoint), compiles, then loops.
At each step boundary it evaluates the held-out split when due, applies operator commands (control), waits while
paused, and saves a checkpoint when one is due (checkpoint); then it dispatches the next step and publishes the
previous step's metrics while the device computes, so the device never waits on logging. The heartbeat and the
hardware sampler run on their own threads. Side effects live here; `training.step` stays pure. Saving and restoring
the run's checkpoints: training.run_checkpoints (Trainer's base class).
"""

from __future__ import annotations

import logging
import math
import os
import time
import traceback
from functools import partial
from pathlib import Path

import jax
import numpy as np

from observatory import contract
from training import checkpoint as ckpt_lib
from training import distributed
from training import experiment as experiment_lib
from training import mesh as mesh_lib
from training import step as step_lib
from training.commands import apply_commands
from training.compile_cache import CacheCounter, enable_compilation_cache
from training.config import RunConfig
from training.control import ControlChannel
from training.errors import CheckpointError, ConfigError, Interrupted, TrainingFailed
from training.flops import counts
from training.heartbeat import Heartbeat, Progress
from training.mesh import make_mesh
from training.run_checkpoints import KEEP_OLD, RunCheckpoints
from training.run_state import RunState
from training.runlock import lock_run
from training.sampler import build_sampler
from training.schedule import Schedule
from training.shards import load_prepared
from training.sinks import Sink
from training.telemetry import HardwareMonitor, StepTimer, peak_flops

log = logging.getLogger(__name__)

CONTROL_CATCH_UP_S = 10.0  # at start, wait at most this long for the control reader to queue waiting commands


class Trainer(RunCheckpoints):
    """One run of the config. `run()` trains until done and returns the exit status (0 stopped, 1 failed)."""

    def __init__(self, cfg: RunConfig, run_id: str, sink: Sink, *, control: ControlChannel | None = None,
                 fresh: bool = False, registration: dict | None = None):
        self.cfg, self.run_id, self.sink, self.control, self.fresh = cfg, run_id, sink, control, fresh
        self.registration = registration  # a verified forecast registration (training.experiment), published
        self.started_at = time.time()  # the run's first start (an earlier one is read back at setup)
        enable_compilation_cache(cfg.run.compile_cache)
        self.tokens_per_step = cfg.train.batch_size * cfg.model.seq_len
        self.state = RunState()
        self._saved_host: dict[int, str] = {}  # step -> _host_signature() of the checkpoint there, as saved/restored
        self.progress = Progress(cfg.train.token_budget, self.tokens_per_step)
        self.heartbeat = Heartbeat(self.progress, partial(sink.record, "heartbeat"), cfg.sinks.heartbeat_s)
        self.hardware = HardwareMonitor(interval_s=1.0)
        self.checkpointer: ckpt_lib.Checkpointer | None = None
        self._lock = None
        # Where commands are applied and acked: process 0's control channel; other processes of a multi-process
        # job follow the commands process 0 read (distributed.agree); None: no commands at all.
        multi = jax.process_count() > 1
        self.channel = control if control is not None else (distributed.Followers() if multi else None)
        self._stop_asked: str | None = None  # a stop asked of this process, not yet agreed by all

    # ------------------------------------------------------------------------------------------ publishing
    def phase(self, state: str, detail: str = "") -> None:
        self.progress.phase = state
        self.sink.record("state", {"t": time.time(), "state": state, "step": self.state.step, "detail": detail})
        log.info("[%s] %s", self.run_id, f"{state} step={self.state.step} {detail}".rstrip())

    def event(self, name: str, payload: dict) -> None:
        self.sink.event(name, self.state.step, ckpt_lib.to_json(payload))

    def rewind(self, from_step: int, to_step: int) -> None:
        self.sink.record("rewind", {"t": time.time(), "from_step": from_step, "to_step": to_step})

    def interrupted(self) -> None:
        """The next step interval is not a throughput sample (after a pause, compile, save, eval or rollback)."""
        self.progress.reset_rate()
        self.state.restart_timer = True

    def before_first_step(self) -> bool:
        """Still starting or compiling, in a single-process run (a job's processes stop at an agreed step)."""
        return self.progress.phase in ("starting", "compiling") and jax.process_count() == 1

    def request_stop(self, why: str) -> None:
        if jax.process_count() > 1:  # every process must stop at the same boundary: agreed there
            self._stop_asked = why
            return
        self.state.stop_reason = why
        self.state.paused = False

    # ------------------------------------------------------------------------------------------ setup
    def _setup(self) -> None:
        cfg, s = self.cfg, self.state
        self.mesh = make_mesh(cfg.mesh)
        n_dev = self.mesh.size
        if cfg.train.batch_size % n_dev:
            raise ConfigError("train.batch_size", f"{cfg.train.batch_size} sequences must split evenly over the "
                                                  f"{n_dev} devices of the mesh")
        self.batch_sh = {n: mesh_lib.batch_sharding(self.mesh, n) for n in (1, 2)}
        self.scalar_sh = mesh_lib.replicated(self.mesh)
        ck_dir = Path(cfg.checkpoint.dir) / self.run_id
        leader = distributed.is_leader()
        if leader:  # the other processes of a job write the same run, under its lock
            self._lock = lock_run(ck_dir)
            if self.fresh and (moved := ckpt_lib.set_aside_run(ck_dir)):
                log.info("[%s] --fresh: previous checkpoints moved to %s", self.run_id, moved)
            self.started_at = experiment_lib.mark_started(ck_dir, self.run_id, self.started_at)
        # A BPE tokenizer lives beside the checkpoints: process 0 trains it on a fresh run, the others load it.
        # With data.prepared: the token shards of `python -m training data prepare` (training.shards).
        build = partial(load_prepared, cfg.data) if cfg.data.prepared else \
            partial(build_sampler, cfg.data, cache_dir=cfg.run.data_cache or None)
        build = partial(build, cfg.model.seq_len, cfg.train.batch_size, cfg.run.seed, cfg.train.token_budget,
                        vocab_size=cfg.model.vocab_size, tokenizer_file=ck_dir / "tokenizer.json")
        self.sampler = build(may_train=True) if leader else None
        distributed.barrier("run-directory-ready")
        self.sampler = self.sampler or build(may_train=False)
        self.domain_names = list(self.sampler.domain_names)
        self.schedule = Schedule(cfg.train, max(1, math.ceil(cfg.train.token_budget / self.tokens_per_step)))
        c = cfg.checkpoint
        store = ckpt_lib.Checkpoints(ck_dir, c.keep_last, c.keep_every, c.async_save)
        publish = self.control.publish_checkpoints if self.control else None  # the list operators roll back to
        self.checkpointer = ckpt_lib.Checkpointer(c, store, self.event, publish)
        latest = store.latest_step()
        manifest = self.sampler.manifest()
        self.data_hashes = {d["name"]: d["sha256"] for d in manifest["domains"]}
        if latest is not None:  # fail fast, before building the model, on an incompatible checkpoint
            try:
                meta = store.check_compatible(latest, cfg.fingerprint())
            except CheckpointError as e:
                raise TrainingFailed(f"{e} -- {KEEP_OLD}") from None
            self._check_data(meta.get("data_hashes") or {})
        # Created in its shardings by one jitted program: no device ever holds all the experts. A resume overwrites
        # all of it, so there only its shapes and shardings are made (to restore into): no init program to run.
        init = step_lib.jit_init_state(cfg, self.mesh)
        key = jax.random.PRNGKey(cfg.run.seed)
        self.train_state = jax.eval_shape(init, key) if latest is not None else init(key)
        self.sink.record("manifest", {"t": time.time(), "manifest": manifest})
        published = self.sink.last_step()
        if latest is not None:
            self.restore(latest)
            self.event("resumed", {"from_checkpoint": latest, "directory": str(store.directory)})
        if self.registration is not None:  # on every (re)start, at the current step, before any training step
            self.event("forecast", self.registration)
        if self.control is not None:
            s.commands, lost = self.control.start(s.commands, latest)
            if lost:
                self.event("commands_rolled_back", {"ids": lost, "resumed_step": latest, "detail": "applied after "
                                                    "the last checkpoint; send it again with a new id to apply it"})
        if published is not None or latest is not None:
            self.rewind(max(published or 0, s.step), s.step)
        self.eval_batches = {d: mesh_lib.put(b, self.batch_sh[2]) for d, b in
                             (self.sampler.eval_batches() if cfg.train.eval_every else {}).items()}

    def _compile(self) -> None:
        self.phase("compiling")
        t0 = time.perf_counter()
        B, L = self.cfg.train.batch_size, self.cfg.model.seq_len
        fn = step_lib.jit_train_step(self.cfg, len(self.domain_names), self.mesh)
        sds = jax.ShapeDtypeStruct
        self.step_fn = fn.lower(self.train_state, sds((B, L + 1), np.int32), sds((B,), np.int32),
                                sds((), np.float32), sds((), np.float32)).compile()
        self.eval_fn = step_lib.jit_eval_step(self.cfg, self.mesh)  # compiled at its first use
        secs = time.perf_counter() - t0
        c = counts(self.cfg.model)
        dev = jax.devices()
        peak, how = peak_flops(dev[0].device_kind, len(dev), self.cfg.train.peak_flops or None)
        self.timer = StepTimer(self.tokens_per_step, c["flops_per_token"], peak)
        self.event("compiled", {"seconds": secs, **c, "peak_flops": peak, "peak_flops_source": how,
                                "devices": f"{len(dev)} x {dev[0].device_kind}",
                                "mesh": dict(self.mesh.shape), "processes": jax.process_count(),
                                **step_lib.state_memory(self.train_state),
                                "gpu_telemetry": self.hardware.gpu_backend,
                                "compile_cache": {"dir": jax.config.jax_compilation_cache_dir,
                                                  **self.compile_cache.snapshot()}})
        self.interrupted()

    # ------------------------------------------------------------------------------------------ hooks
    def _evaluate(self) -> dict[str, float]:
        """Loss on each domain's held-out batch under the current params, and their mean."""
        losses = jax.device_get({d: self.eval_fn(self.train_state, b) for d, b in self.eval_batches.items()})
        out = {contract.eval_domain_loss(d): float(v) for d, v in losses.items()}
        out[contract.M_EVAL_LOSS] = float(np.mean(list(losses.values())))
        return out

    def _boundary(self, pending):
        """Between two steps: eval, commands, pause, checkpoint, stall. Returns the step still pending, if any."""
        s, every = self.state, self.cfg.train.eval_every
        if pending and every and s.step % every == 0:
            self._complete(pending, evaluate=True)
            pending = None
        d = self._agree(self.control.poll() if self.control else [])
        if d.commands:
            if pending:
                self._complete(pending)
                pending = None
            apply_commands(d.commands, s, self, self.channel)
            d = self._agree([])  # a command may have moved the step (rollback) or the checkpoint clock
        while s.paused and not s.stop_reason and self.channel is not None:
            apply_commands(self._agree(self.control.wait(0.25) if self.control else []).commands, s, self,
                           self.channel)
        if d.written:  # (on every process or none: reporting a finished write prunes, which is collective)
            self.checkpointer.poll(block=True)
        if not s.stop_reason and d.checkpoint_due:
            if pending:
                self._complete(pending)
                pending = None
            self.save_checkpoint("periodic")
        if s.faults.stall_s > 0:
            stall, s.faults.stall_s = s.faults.stall_s, 0.0
            end = time.monotonic() + stall
            while time.monotonic() < end and not s.stop_reason:
                time.sleep(0.05)
        return pending

    def _agree(self, commands: list) -> distributed.Decision:
        """This boundary's decisions, the same on every process (process 0's commands and checkpoint clock)."""
        s = self.state
        d = distributed.agree(commands, not s.stop_reason and self.checkpointer.due(s.step), self._stop_asked,
                              self.checkpointer.written())
        if d.stop_reason and not s.stop_reason:
            s.stop_reason, s.paused = d.stop_reason, False
        return d

    # ------------------------------------------------------------------------------------------ one step
    def _dispatch(self):
        """Start the next step on the device; returns what `_complete` needs to publish it."""
        s = self.state
        if s.restart_timer:
            self.timer.start()
            s.restart_timer = False
        batch = self.sampler.next_batch()
        self.timer.mark("data")
        lr_factor, loss_scale, faulty = s.faults.take_step()
        lr = self.schedule.lr(s.step) * lr_factor
        host = {**self.sampler.metrics(), **self.schedule.metrics(),
                contract.M_TOTAL_TOKENS: float(self.sampler.tokens_seen)}
        if faulty:
            host[contract.M_FAULT_ACTIVE] = 1.0
        put = mesh_lib.put
        self.train_state, metrics = self.step_fn(
            self.train_state, put(batch.tokens_BxL, self.batch_sh[2]), put(batch.domain_ids_B, self.batch_sh[1]),
            put(np.float32(lr), self.scalar_sh), put(np.float32(loss_scale), self.scalar_sh))
        s.step += 1
        return s.step, metrics, host, math.isnan(loss_scale)

    def _complete(self, pending, evaluate: bool = False) -> None:
        """Fetch a dispatched step's metrics, publish them, and give up after too many non-finite steps."""
        step, metrics, host, injected_nan = pending
        m = jax.device_get(metrics)
        self.timer.mark("compute")
        values = {**step_lib.to_host_metrics(m, self.domain_names), **host, **self.timer.end(),
                  **self.hardware.due(), **self.sink.health()}
        if evaluate:
            values.update(self._evaluate())
            self.interrupted()
        self.sink.log(values, step)
        s = self.state
        s.last_published = step
        # Progress counts completed steps: completions are paced by the device, dispatches are not.
        self.progress.stepped(step, int(host[contract.M_TOTAL_TOKENS]))
        if values[contract.M_FINITE] >= 1:
            s.nonfinite_run = 0
            return
        s.nonfinite_run += 0 if injected_nan else 1
        if s.nonfinite_run >= self.cfg.train.max_nonfinite_steps:
            raise TrainingFailed(f"loss or gradient non-finite for {s.nonfinite_run} consecutive steps (last: step "
                                 f"{step}, loss {values[contract.M_LOSS]}); updates were skipped. Roll back to a "
                                 f"checkpoint or lower the LR.")

    # ------------------------------------------------------------------------------------------ the run
    def _finished(self) -> str | None:
        s = self.state
        if s.stop_reason:
            return s.stop_reason
        if self.cfg.run.steps and s.step >= self.cfg.run.steps:
            return f"reached run.steps ({self.cfg.run.steps})"
        if self.sampler.tokens_seen >= self.sampler.token_budget:
            return f"token budget reached ({self.sampler.token_budget} tokens)"
        return None

    def _loop(self) -> str:
        """Steps until a stop condition; returns why it stopped, after saving the last step."""
        pending = None
        if self.control is not None:
            self.control.caught_up(CONTROL_CATCH_UP_S)  # commands sent while it was down: at the first boundary
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
        if self.state.step not in self.checkpointer.store.steps():
            self.save_checkpoint("final", wait=True)
        self.checkpointer.poll(block=True)
        return why

    def run(self) -> int:
        """Train until done: 0 stopped cleanly, 1 failed.

        A ConfigError found only at start-up (a corpus directory, a data domain) is published, then raised.
        """
        cfg = self.cfg
        exp = cfg.experiment
        experiment = {"name": exp.name, "goal": exp.goal, "hypothesis": exp.hypothesis,
                      "forecast_sha256": self.registration["sha256"] if self.registration else None}
        self.sink.record("run", {"t": time.time(), "name": cfg.run.name, "run_id": self.run_id,
                                 "config": cfg.to_dict(), "started_at": time.time(), "pid": os.getpid(),
                                 "counts": counts(cfg.model),
                                 **({"experiment": experiment} if exp.name or self.registration else {})})
        self.phase("starting")
        self.compile_cache = CacheCounter().start()  # the `compiled` event says whether programs came from it
        self.heartbeat.start()
        self.hardware.start()
        try:
            self._setup()
            self._compile()
            self.phase("training", f"step {self.state.step} of {self.schedule.total_steps} planned")
            self.phase("stopped", self._loop())
            return 0
        except Interrupted as e:  # a signal while starting or compiling (cli.install_signal_handlers)
            self.phase("stopped", str(e))
            return 0
        except ConfigError as e:
            self.phase("failed", e.line())
            raise
        except Exception as e:
            tb = traceback.format_exc()
            self.phase("failed", f"{type(e).__name__}: {e}\n" + "".join(tb.splitlines(True)[-12:])[-3000:])
            return 1
        finally:
            self._shutdown()

    def _shutdown(self) -> None:
        self.compile_cache.stop()
        self.heartbeat.stop()
        self.heartbeat.beat()  # the final phase (stopped or failed) reaches the heartbeat key at once
        self.hardware.stop()
        if self.control:
            self.control.close()
        if self.checkpointer:
            try:
                self.checkpointer.store.close()
            except Exception as e:
                log.warning("[%s] checkpoint close failed: %s", self.run_id, e)
        if self._lock is not None:
            self._lock.close()  # releases the flock once the last write is on disk
        self.sink.finish()
