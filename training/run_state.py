"""The loop's mutable state between steps: what operator commands change and what checkpoints carry besides arrays."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field


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
    applied_ids: set[str] = field(default_factory=set)  # command ids applied (so a repeat is never re-applied)
    nonfinite_run: int = 0  # consecutive non-finite steps, injected NaNs not counted
    last_published: int | None = None  # newest step whose metrics went to the sinks
    restart_timer: bool = True  # the next step interval is not a throughput sample (after a pause, save, ...)

    def meta(self) -> dict:
        """The part a checkpoint carries (JSON)."""
        return {"applied_ids": sorted(self.applied_ids), "faults": dataclasses.asdict(self.faults),
                "nonfinite_run": self.nonfinite_run}

    def restore(self, meta: dict) -> None:
        """Back to a checkpoint's state; applied ids accumulate (a rollback must not forget later commands)."""
        self.step = int(meta["step"])
        self.faults = Faults(**meta.get("faults", {}))
        self.nonfinite_run = int(meta.get("nonfinite_run", 0))
        self.applied_ids |= set(meta.get("applied_ids", []))
