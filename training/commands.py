"""Operator commands applied at a step boundary: one function per command, acting on the loop's RunState.

`apply_commands` deduplicates, applies and acknowledges (the reading and acking on Redis is training.control's).
Each handler `(cmd, state, ctx) -> detail` returns the ack's detail or raises CommandError, acked `rejected` with
that reason while the run carries on. `ctx` is what a handler may touch besides the state (the Trainer).
A destructive command (contract.COMMAND_SPECS) is preceded by a checkpoint of the state it is about to end or
discard, once its own checks passed. A rollback undoes the commands applied after the checkpoint it restores
(except pause/resume/stop, whose effect is on the loop, not the state): their ids are remembered as undone (a
replay of one is refused: it goes again under a new id) and a `commands_rolled_back` event lists them. A command the
reader refused on arrival (`cmd.refused`: stale, or issued in the future) is remembered as rejected, never applied.
"""

from __future__ import annotations

import math
from typing import Callable, Protocol

from observatory.contract import COMMAND_SPECS, Command
from training.checkpoint import Checkpointer
from training.config import RunConfig
from training.control import ControlChannel
from training.errors import CommandError, ConfigError, TrainingFailed
from training.heartbeat import Progress
from training.run_state import RunState, seen_in_meta
from training.sampler import MixtureSampler
from training.schedule import Schedule


NOT_UNDONE_BY_ROLLBACK = frozenset({"pause", "resume", "stop"})  # they act on the loop, not the restored state


class Context(Protocol):
    control: ControlChannel | None
    cfg: RunConfig
    schedule: Schedule
    sampler: MixtureSampler
    checkpointer: Checkpointer
    progress: Progress
    tokens_per_step: int

    def phase(self, state: str, detail: str = "") -> None: ...  # publish a lifecycle state
    def event(self, name: str, payload: dict) -> None: ...
    def save_checkpoint(self, why: str, wait: bool = False, replace: bool = True) -> dict: ...
    def restore(self, step: int) -> None: ...  # raises TrainingFailed; assigns nothing unless all reads back
    def rewind(self, from_step: int, to_step: int) -> None: ...  # published points after to_step are superseded
    def interrupted(self) -> None: ...  # the next step interval is not a throughput sample


def apply_commands(cmds: list[Command], state: RunState, ctx: Context, channel: ControlChannel) -> None:
    for cmd in cmds:
        known = state.commands.get(cmd.id)
        if known is not None:  # restored from a checkpoint's memory after the reader saw it
            channel.repeated(cmd, known, state.step)
            continue
        if cmd.refused:
            state.remember(cmd, "rejected", cmd.refused)
            channel.rejected(cmd, cmd.refused, state.step)
            continue
        state.remember(cmd, "applied")  # before applying: a stop/checkpoint saves the id with the state
        try:
            handler = HANDLERS.get(cmd.name)
            if handler is None:  # the contract knows a command this trainer does not
                raise CommandError(f"unknown command {cmd.name!r}")
            spec = COMMAND_SPECS.get(cmd.name)
            if spec is not None and spec.destructive:
                PRECHECKS.get(cmd.name, lambda *a: None)(cmd, state, ctx)
                # a rollback may restore the checkpoint at this very step: the state it abandons is not written
                # over it (the commands it undoes are recorded as undone)
                ctx.save_checkpoint(f"before {cmd.name} {cmd.id}", wait=True, replace=cmd.name != "rollback")
            detail = handler(cmd, state, ctx)
        except (CommandError, ConfigError, ValueError) as e:
            state.remember(cmd, "rejected", str(e))
            channel.rejected(cmd, str(e), state.step)
            continue
        channel.applied(cmd, detail, state.step)
        ctx.event("command", {"id": cmd.id, "command": cmd.name, "args": cmd.args, "reason": cmd.reason,
                              "user": cmd.user, "detail": detail})


def pause(cmd: Command, s: RunState, ctx: Context) -> str:
    if s.paused:
        raise CommandError("already paused")
    s.paused = True
    ctx.phase("paused", f"by {cmd.user or 'operator'}: {cmd.reason}")
    return f"paused at step {s.step}"


def resume(cmd: Command, s: RunState, ctx: Context) -> str:
    if not s.paused:
        raise CommandError("not paused")
    s.paused = False
    ctx.interrupted()
    ctx.phase("training", f"resumed by {cmd.user or 'operator'}")
    return f"resumed at step {s.step}"


def stop(cmd: Command, s: RunState, ctx: Context) -> str:
    s.stop_reason = f"stop command {cmd.id}: {cmd.reason}"
    info = ctx.save_checkpoint("stop", wait=True)
    return f"checkpoint at step {info['step']} written; exiting"


def checkpoint(cmd: Command, s: RunState, ctx: Context) -> str:
    info = ctx.save_checkpoint(f"command {cmd.id}", wait=True)
    if "skipped" in info:
        return f"checkpoint at step {s.step} already exists"
    return (f"checkpoint at step {info['step']}: loop blocked {info['blocked_s']:.3f} s, written in "
            f"{info.get('write_s', 0):.3f} s")


def rollback_target(cmd: Command, s: RunState, ctx: Context) -> int:
    """The checkpoint a rollback restores: the asked step, or the nearest earlier checkpoint."""
    asked, steps = cmd.args["step"], ctx.checkpointer.store.steps()
    if asked > s.step:
        raise CommandError(f"no checkpoint at step {asked}: the run is at step {s.step} (available: {steps})")
    earlier = [c for c in steps if c <= asked]
    if not earlier:
        raise CommandError(f"no checkpoint at step {asked} or before it (available: {steps})")
    return earlier[-1]


def rollback(cmd: Command, s: RunState, ctx: Context) -> str:
    asked, skip = cmd.args["step"], cmd.args["skip_batches"]
    store = ctx.checkpointer.store
    ctx.checkpointer.poll(block=True)
    target = rollback_target(cmd, s, ctx)
    try:
        saved = seen_in_meta(store.read_meta(target))
    except Exception as e:
        raise CommandError(f"cannot roll back: {e}") from None
    before = set(s.applied_ids)
    from_step = max(s.last_published or 0, s.step, target)
    try:
        ctx.restore(target)
    except TrainingFailed as e:
        raise CommandError(f"cannot roll back: {e}") from None
    if skip:
        ctx.sampler.skip(skip)
    aside = store.set_aside_after(target)
    s.last_published = target
    ctx.rewind(from_step, target)
    saved_ids = {i for i, r in saved.items() if r["outcome"] == "applied"}
    undone = sorted(i for i in before - saved_ids - {cmd.id}
                    if s.commands[i].get("command") not in NOT_UNDONE_BY_ROLLBACK)
    for i in undone:
        s.commands[i] = {**s.commands[i], "outcome": "undone", "by": cmd.id, "step": target}
    channel = getattr(ctx, "control", None)
    if channel is not None:
        channel.remember({i: s.commands[i] for i in undone})
    ctx.event("rollback", {"from_step": from_step, "to_step": target, "asked_step": asked, "skip_batches": skip,
                           "set_aside": aside, "undone": undone})
    if undone:
        ctx.event("commands_rolled_back", {"ids": undone, "by": cmd.id, "to_step": target,
                                           "detail": f"undone by rollback {cmd.id} to step {target}"})
    ctx.checkpointer.publish_list()
    ctx.interrupted()
    ctx.checkpointer.restart_clock()
    return (f"rolled back to step {target}"
            + (f" (the nearest checkpoint at or before step {asked})" if target != asked else "")
            + (f", skipping {skip} batches" if skip else "")
            + (f"; newer checkpoints {aside} set aside" if aside else "")
            + (f"; undid {len(undone)} command(s): {', '.join(undone)}" if undone else ""))


def set_lr_multiplier(cmd: Command, s: RunState, ctx: Context) -> str:
    p = ctx.schedule.set_multiplier(cmd.args["value"])
    ctx.event("lr_multiplier", p)
    return f"LR multiplier {p['old']:g} -> {p['new']:g}; LR now {ctx.schedule.lr(s.step):.3g}"


def set_token_budget(cmd: Command, s: RunState, ctx: Context) -> str:
    tokens = cmd.args["tokens"]
    if tokens <= ctx.sampler.tokens_seen:
        raise CommandError(f"new budget {tokens} must exceed tokens seen ({ctx.sampler.tokens_seen})")
    new_total = max(s.step + 1, math.ceil(tokens / ctx.tokens_per_step))
    p = ctx.schedule.replan(s.step, new_total)
    p["data"] = ctx.sampler.set_token_budget(tokens)
    ctx.progress.token_budget = tokens
    ctx.event("lr_replan", p)
    return (f"token budget {p['data']['old_budget']} -> {tokens}; decay re-planned to step {new_total}, "
            f"LR {p['lr_before']:.3g} -> {p['lr_after']:.3g} at step {s.step}")


def set_mixture(cmd: Command, s: RunState, ctx: Context) -> str:
    p = ctx.sampler.set_weights(cmd.args["weights"])
    ctx.event("mixture_changed", p)
    return f"stage {p['stage']} mixture now " + ", ".join(f"{k}={v:.3g}" for k, v in p["new"].items())


def inject_fault(cmd: Command, s: RunState, ctx: Context) -> str:
    if not ctx.cfg.train.allow_faults:
        raise CommandError("fault injection is disabled for this run (train.allow_faults)")
    a = cmd.args
    fault, n = a["fault"], a["steps"]
    if fault == "lr-spike":
        s.faults.lr_steps, s.faults.lr_factor = n, a["factor"]
    elif fault == "nan":
        s.faults.nan_steps = n
    else:
        s.faults.stall_s = a["seconds"]
    ctx.event("fault_injected", {"fault": fault, **a})
    return f"{fault} injected from step {s.step + 1}" + (f" for {n} steps" if fault != "stall" else "")


PRECHECKS: dict[str, Callable[[Command, RunState, Context], object]] = {"rollback": rollback_target}
HANDLERS: dict[str, Callable[[Command, RunState, Context], str]] = {
    "pause": pause, "resume": resume, "stop": stop, "checkpoint": checkpoint, "rollback": rollback,
    "set-lr-multiplier": set_lr_multiplier, "set-token-budget": set_token_budget, "set-mixture": set_mixture,
    "inject-fault": inject_fault}
