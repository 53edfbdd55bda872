"""The loop's mutable state between steps: what operator commands change and what checkpoints carry besides arrays."""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field

from observatory.contract import STALE_AFTER_S, Command

OUTCOMES = ("applied", "rejected", "undone")  # a later one wins when two memories disagree (merge_seen)


@dataclass
class Faults:
    """Injected faults still in effect (checkpointed, so a resume replays them exactly)."""
    lr_steps: int = 0  # steps left with the LR multiplied by lr_factor
    lr_factor: float = 1.0
    nan_steps: int = 0  # steps left whose loss is multiplied by NaN
    stall_s: float = 0.0  # seconds the loop sleeps at the next step boundary

    def take_step(self) -> tuple[float, float, bool]:
        """(LR factor, loss scale, any fault active) for the next step, counting it against the faults."""
        active = self.lr_steps > 0 or self.nan_steps > 0
        lr_factor = self.lr_factor if self.lr_steps > 0 else 1.0
        loss_scale = math.nan if self.nan_steps > 0 else 1.0
        self.lr_steps, self.nan_steps = max(0, self.lr_steps - 1), max(0, self.nan_steps - 1)
        return lr_factor, loss_scale, active


@dataclass
class RunState:
    step: int = 0  # steps dispatched so far (the step the next boundary follows)
    paused: bool = False  # the loop waits for commands at the boundary
    stop_reason: str | None = None  # set: the loop ends at the next boundary
    faults: Faults = field(default_factory=Faults)
    commands: dict[str, dict] = field(default_factory=dict)  # id -> what became of it (seen_record): no replays
    nonfinite_run: int = 0  # consecutive non-finite steps, injected NaNs not counted
    last_published: int | None = None  # newest step whose metrics went to the sinks
    restart_timer: bool = True  # the next step interval is not a throughput sample (after a pause, save, ...)

    @property
    def applied_ids(self) -> set[str]:
        """Ids of the commands whose effect is in this state."""
        return {i for i, r in self.commands.items() if r["outcome"] == "applied"}

    def remember(self, cmd: Command, outcome: str, detail: str = "") -> None:
        self.commands[cmd.id] = seen_record(cmd, outcome, detail)

    def meta(self) -> dict:
        """The part a checkpoint carries (JSON)."""
        return {"commands": prune_seen(self.commands, time.time()), "faults": dataclasses.asdict(self.faults),
                "nonfinite_run": self.nonfinite_run}

    def restore(self, meta: dict) -> None:
        """Back to a checkpoint's state; the command memory accumulates (a rollback must not forget later commands,
        nor make an undone one acceptable again)."""
        self.step = int(meta["step"])
        self.faults = Faults(**meta.get("faults", {}))
        self.nonfinite_run = int(meta.get("nonfinite_run", 0))
        self.commands = merge_seen(self.commands, seen_in_meta(meta))


def seen_record(cmd: Command, outcome: str, detail: str = "") -> dict:
    """What the trainer remembers of a command id: its outcome, issue time, nonce and name (and why it was
    rejected). The recent ones' nonces are the checkpoint's share of the replay memory (control.ControlChannel)."""
    rec = {"outcome": outcome, "t": cmd.t, "command": cmd.name, "nonce": cmd.nonce}
    return {**rec, "detail": detail[:300]} if detail else rec


def seen_in_meta(meta: dict) -> dict[str, dict]:
    """A checkpoint's command memory (checkpoints from before it kept a list of applied ids only)."""
    if "commands" in meta:
        return dict(meta["commands"])
    return {i: {"outcome": "applied", "t": 0.0, "command": ""} for i in meta.get("applied_ids", [])}


def merge_seen(mine: dict[str, dict], other: dict[str, dict]) -> dict[str, dict]:
    """Both memories; where they disagree the later outcome wins (undone over rejected over applied)."""
    out = dict(mine)
    for i, rec in other.items():
        if rec.get("outcome") in OUTCOMES and (i not in out or
                                               OUTCOMES.index(rec["outcome"]) > OUTCOMES.index(out[i]["outcome"])):
            out[i] = rec
    return out


def prune_seen(seen: dict[str, dict], now: float) -> dict[str, dict]:
    """Without rejected ids issued more than STALE_AFTER_S ago: a replay of those is refused as stale anyway.
    Applied and undone ids are kept for the run's life (a retry may come with a fresh issue time)."""
    return {i: r for i, r in seen.items() if r["outcome"] != "rejected" or now - float(r["t"]) <= STALE_AFTER_S}
