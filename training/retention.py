"""Which checkpoints to keep: a pure policy over (step, why, size) entries, so a rollback target stays on disk.

Kept, each with the reason the listing shows: the newest `keep_last`; every multiple of `keep_every` (forever);
every multiple of `recent_every` within the newest `recent_steps` steps; and, with `keep_manual`, every
checkpoint an operator asked for, taken before a destructive command, or written at a stop or the end. Then, with
a disk budget, the oldest kept ones go (unprotected before protected) until the rest fit, never the newest.
"""

from __future__ import annotations

from dataclasses import dataclass

PERIODIC, MANUAL, PRE_COMMAND, FINAL = "periodic", "manual", "pre-command", "final"


def kind_of(why: str) -> str:
    """The checkpoint's kind from the `why` the loop saved it with ("periodic", "command <id>", "before ...")."""
    if why == PERIODIC or not why:
        return PERIODIC
    if why.startswith("before "):
        return PRE_COMMAND
    if why.startswith("command "):
        return MANUAL
    return FINAL  # "stop", "final", a signal: the state a run ended in


@dataclass(frozen=True)
class Entry:
    step: int
    why: str = PERIODIC
    bytes: int = 0

    @property
    def kind(self) -> str:
        return kind_of(self.why)


@dataclass(frozen=True)
class Retention:
    keep_last: int = 3
    keep_every: int = 0  # 0: none
    recent_every: int = 0  # 0: none
    recent_steps: int = 0
    keep_manual: bool = True
    max_bytes: int = 0  # 0: no disk budget

    @classmethod
    def from_section(cls, c) -> "Retention":
        """From a training.config.CheckpointSection (duck-typed: older configs may lack the newer keys)."""
        return cls(keep_last=c.keep_last, keep_every=c.keep_every, recent_every=getattr(c, "recent_every", 0),
                   recent_steps=getattr(c, "recent_steps", 0), keep_manual=getattr(c, "keep_manual", True),
                   max_bytes=int(getattr(c, "max_disk_gb", 0.0) * 1e9))

    def plan(self, entries: list[Entry]) -> tuple[dict[int, str], dict[int, str]]:
        """({step: why it is kept}, {step: why it goes}) for these checkpoints."""
        entries = sorted(entries, key=lambda e: e.step)
        if not entries:
            return {}, {}
        newest = entries[-1].step
        keep: dict[int, str] = {}
        for e in entries[-self.keep_last:] if self.keep_last > 0 else []:
            keep[e.step] = f"newest {self.keep_last}"
        for e in entries:
            if e.step in keep:
                continue
            if self.keep_every and e.step % self.keep_every == 0:
                keep[e.step] = f"every {self.keep_every} steps"
            elif self.recent_every and e.step % self.recent_every == 0 and newest - e.step <= self.recent_steps:
                keep[e.step] = f"every {self.recent_every} steps in the last {self.recent_steps}"
            elif self.keep_manual and e.kind != PERIODIC:
                keep[e.step] = f"{e.kind} checkpoint"
        drop = {e.step: "not kept by the retention policy" for e in entries if e.step not in keep}
        if self.max_bytes:
            size = {e.step: e.bytes for e in entries}
            total = sum(size[s] for s in keep)
            protected = {e.step for e in entries if e.kind != PERIODIC and self.keep_manual}
            # oldest first, unprotected before protected; the newest checkpoint always stays
            order = sorted((s for s in keep if s != newest), key=lambda s: (s in protected, s))
            for s in order:
                if total <= self.max_bytes:
                    break
                total -= size[s]
                drop[s] = f"over the disk budget ({self.max_bytes / 1e9:g} GB)"
                del keep[s]
        return keep, drop
