"""Operator commands applied to the trainer at a step boundary (the reading and acking is training.control's).

A mixin of `training.train.Trainer`: each command mutates the trainer's state and returns the ack's detail, or
raises `control.CommandError` (acked `rejected` with that reason; the run carries on).
"""

from __future__ import annotations

import math
import time

from training import control as control_lib
from training.errors import ConfigError
from training.runtime import TrainingFailed


class CommandsMixin:
    def _forget_commands_lost_with_the_crash(self, resumed_step: int) -> None:
        """After a resume, ids in the Redis applied set but not in the checkpoint were applied after it, and their
        effect died with the process. Forget them (so resending the same id applies it again) and say so."""
        if not self.redis_url:
            return
        import redis as redis_lib

        try:
            r = redis_lib.Redis.from_url(self.redis_url, socket_timeout=2, socket_connect_timeout=1)
            key = control_lib.applied_key(self.run_id)
            lost = sorted({m.decode() for m in r.smembers(key)} - self.applied_ids)
            if lost:
                r.srem(key, *lost)
        except redis_lib.RedisError:
            return  # Redis is optional for training; the ids are re-checked against the checkpoint's list
        if lost:
            self._event("commands_rolled_back", {"ids": lost, "resumed_step": resumed_step,
                                                 "detail": "applied after the last checkpoint; resend to apply"})

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

