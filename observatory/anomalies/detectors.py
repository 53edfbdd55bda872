"""Per-series anomaly detectors: pure state machines `update(state, step, value) -> (state, events)`.

A detector object is immutable configuration for one series (its kind, metric name and thresholds); everything
that changes lives in `state`, a small JSON-able dict the caller keeps (and snapshots). `update` never mutates
the state it is given. Values are finite here: non-finite values go to `NonFiniteDetector` instead. The shared
base is in `base`, spikes in `spike`, level shifts in `shift`; all are importable from here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from observatory.anomalies.base import NO_EVENTS, SeriesDetector, robust_ema
from observatory.anomalies.model import CRITICAL, WARNING, Event, close_ep, fmt, open_ep, peak_ep
from observatory.anomalies.shift import ShiftDetector
from observatory.anomalies.spike import SpikeDetector


@dataclass(frozen=True)
class ThresholdDetector(SeriesDetector):
    """A value above an absolute limit for many consecutive points (grad norm > 4 at long horizons)."""

    kind: str = "grad_norm_high"
    metric: str = ""
    above: float = 4.0
    close_below: float = 3.6  # hysteresis, so a series hovering at the limit does not flap
    sustain: int = 10  # consecutive points above the limit
    after_step: int = 500  # early training legitimately has large gradients
    crit: float = 8.0

    def fresh(self) -> dict:
        return {"streak": 0, "since": None}

    def update(self, state: dict, step: int, x: float):
        st = self.advance(state, step)
        if st is None:
            return state, NO_EVENTS
        ep = st["ep"]
        if ep is not None:
            if x < self.close_below:
                st.update(ep=None, streak=0, since=None)
                return st, close_ep(self.kind, self.metric, ep, step)
            ep, events = peak_ep(self.kind, self.metric, ep, step, x, self._sev(x), self._why(x, step, ep["start"]))
            st["ep"] = ep
            return st, events
        if step < self.after_step or x <= self.above:
            st["streak"], st["since"] = 0, None
            return st, NO_EVENTS
        streak = st["streak"] = st["streak"] + 1
        if streak == 1:
            st["since"] = step
        if streak < self.sustain:
            return st, NO_EVENTS
        st["ep"], events = open_ep(self.kind, self.metric, step, st["since"], x, self._sev(x),
                                   self._why(x, step, st["since"]))
        return st, events

    def _sev(self, x: float) -> str:
        return CRITICAL if x >= self.crit else WARNING

    def _why(self, x, step, since) -> str:
        return f"{self.metric} {fmt(x)} at step {step}, above {fmt(self.above)} since step {since}"


@dataclass(frozen=True)
class SkipDetector(SeriesDetector):
    """Skipped updates: a finite-flag series (train/finite) at 0 means the step's update was thrown away."""

    kind: str = "overflow"
    metric: str = ""
    crit_after: int = 3  # this many skipped points in a row is critical

    def update(self, state: dict, step: int, x: float):
        st = self.advance(state, step)
        if st is None:
            return state, NO_EVENTS
        ep = st["ep"]
        if x >= 0.5:
            if ep is None:
                return st, NO_EVENTS
            st["ep"] = None
            return st, close_ep(self.kind, self.metric, ep, step)
        if ep is None:
            st["ep"], events = open_ep(self.kind, self.metric, step, step, 1.0, self._sev(1),
                                       f"step {step} was skipped ({self.metric} = 0)")
            return st, events
        count = ep["score"] + 1
        st["ep"], events = peak_ep(self.kind, self.metric, ep, step, count, self._sev(count),
                                   f"{int(count)} skipped steps in a row since step {ep['start']} "
                                   f"({self.metric} = 0)")
        return st, events

    def _sev(self, count: float) -> str:
        return CRITICAL if count >= self.crit_after else WARNING


@dataclass(frozen=True)
class LossScaleDetector(SeriesDetector):
    """A dynamic loss scale that keeps halving without growing back: repeated fp16 overflows.

    Counts halvings, not logged falls: a log written every k steps can show 65536 -> 8192 between two points,
    three overflows. The window is `within` steps, or `within_points` logged points when those span more (a
    coarse log's few points must still see the falls together)."""

    kind: str = "overflow"
    metric: str = ""
    halvings: int = 3  # halvings without a rise in between before it opens...
    within: int = 200  # ...all within this many steps (an isolated overflow every few thousand steps is normal)
    within_points: int = 4  # ...or within this many logged points, when they span more steps
    fall: float = 0.75  # a value below fall × the previous one is a fall

    def fresh(self) -> dict:
        return {"prev": None, "streak": 0, "since": None, "pts": 0}  # streak: halvings since `since`, pts later

    def update(self, state: dict, step: int, x: float):
        st = self.advance(state, step)
        if st is None:
            return state, NO_EVENTS
        prev, st["prev"] = st["prev"], x
        ep = st["ep"]
        if prev is None or x <= 0:
            return st, NO_EVENTS
        if x > prev:
            st["streak"], st["since"], st["ep"], st["pts"] = 0, None, None, 0
            return st, close_ep(self.kind, self.metric, ep, step) if ep is not None else NO_EVENTS
        if st["since"] is not None:
            st["pts"] = st.get("pts", 0) + 1
        if x >= prev * self.fall:
            return st, NO_EVENTS
        if st["since"] is None or (ep is None and step - st["since"] > self.within
                                   and st.get("pts", 0) > self.within_points):
            st["streak"], st["since"], st["pts"] = 0, step, 0
        halved = max(1, round(math.log2(prev / x)))
        falls = st["streak"] = st["streak"] + halved
        if falls < self.halvings:
            return st, NO_EVENTS
        sev = CRITICAL if falls >= 2 * self.halvings else WARNING
        why = f"{self.metric} halved {falls} times since step {st['since']} without growing back: now {fmt(x)}"
        if ep is None:
            st["ep"], events = open_ep(self.kind, self.metric, step, st["since"], float(falls), sev, why)
        else:
            st["ep"], events = peak_ep(self.kind, self.metric, ep, step, float(falls), sev, why)
        return st, events

    def forget(self, st: dict, to_step: int) -> None:
        st["prev"] = None
        super().forget(st, to_step)


__all__ = ["NO_EVENTS", "SeriesDetector", "SpikeDetector", "ShiftDetector", "ThresholdDetector", "SkipDetector",
           "LossScaleDetector", "robust_ema", "Event"]
