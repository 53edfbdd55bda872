"""What an applied batch changed in one run, as plain data: ingest returns it, later apps (live pushes) react to it.

Neutral on purpose: no Channels, no wire format. Changes merge in order, so any number of batches can be
coalesced into one before anyone looks at them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable

# What later apps do inside the ingest process, without metrics or live importing them (they register in their
# AppConfig.ready()). live.LiveIngest calls every hook with each committed batch's changes ({run id: RunChanges}),
# after the commit and before the XACK, so a crash in between re-delivers the batch to the hook; and every timer
# about once per TIMER_EVERY_S, with the current Unix time, even when no entry arrives. Both return the frames to
# push to the run's browsers, [(run id, {"type": ..., ...})] (webapp/live/protocol.py documents the types). A hook
# must not change the RunChanges it is given (they are pushed afterwards).
Frames = Iterable[tuple[str, dict]]
on_commit_hooks: list[Callable[[dict[str, "RunChanges"]], Frames]] = []
timers: list[Callable[[float], Frames]] = []
TIMER_EVERY_S = 5.0
# What `manage.py ingest` (metrics' command) runs, set by live in its AppConfig.ready(): a callable
# (client, consumer=, batch=, interval=, lease_ms=) -> a process with step(block_ms), drain(), close() and `stats`.
ingest_process: Callable[..., object] | None = None


@dataclass
class RunChanges:
    points: dict[str, dict[int, tuple[float | None, int]]] = field(default_factory=dict)  # name -> step -> (v, sp)
    rewinds: list[dict] = field(default_factory=list)  # [{"from_step", "to_step"}], in order
    events: list[dict] = field(default_factory=list)  # RunEvent.as_dict() of the events recorded
    run: dict | None = None  # the run's summary after the batch, when the batch touched the run
    new_series: set[str] = field(default_factory=set)  # series the batch created
    times: dict[int, float] = field(default_factory=dict)  # step -> its metrics message's `t`, where known

    def __bool__(self):
        return bool(self.points or self.rewinds or self.events or self.run or self.new_series)

    def add_point(self, name: str, step: int, value: float | None, special: int) -> None:
        self.points.setdefault(name, {})[step] = (value, special)

    def rewind(self, from_step: int, to_step: int) -> None:
        """Points after to_step are superseded, the ones noted so far included."""
        for pts in self.points.values():
            for step in [s for s in pts if s > to_step]:
                del pts[step]
        for step in [s for s in self.times if s > to_step]:
            del self.times[step]
        self.rewinds.append({"from_step": from_step, "to_step": to_step})

    def merge(self, later: RunChanges) -> None:
        for rw in later.rewinds:
            self.rewind(rw["from_step"], rw["to_step"])
        for name, pts in later.points.items():
            self.points.setdefault(name, {}).update(pts)
        self.events.extend(later.events)
        self.run = later.run or self.run
        self.new_series |= later.new_series
        self.times.update(later.times)
