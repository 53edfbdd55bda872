"""Per-series anomaly detectors: pure state machines `update(state, step, value) -> (state, events)`.

A detector object is immutable configuration for one series (its kind, metric name and thresholds); everything
that changes lives in `state`, a small JSON-able dict the caller keeps (and snapshots). `update` never mutates
the state it is given. Every state holds "last" (the newest step seen: older or repeated steps are ignored, so
re-delivered points are harmless) and "ep" (the open episode, or None). Values are finite here: non-finite
values go to `NonFiniteDetector` instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from observatory.anomalies.model import (CRITICAL, WARNING, Anomaly, Event, anomaly, close_ep, fmt, open_ep, peak_ep,
                                         severity_for)

NO_EVENTS: tuple = ()


class SeriesDetector:
    """What all detectors share: a fresh state, and forgetting what came after a rewind."""

    kind: str
    metric: str

    @property
    def key(self) -> str:
        return f"{self.kind} {self.metric}"

    def init(self) -> dict:
        return {"last": -1, "ep": None, **self.fresh()}

    def fresh(self) -> dict:
        return {}

    @staticmethod
    def advance(state: dict, step: int) -> dict | None:
        """A copy of `state` moved on to `step`, or None for a step already seen (re-delivery is a no-op)."""
        return None if step <= state["last"] else {**state, "last": step}

    def rewind(self, state: dict, to_step: int) -> tuple[dict, list[Anomaly]]:
        """Forget points after `to_step`; open episodes that began after it are returned (superseded).

        Smoothed statistics (levels, spreads) keep what the superseded points taught them: they move by a few
        percent per point and freeze during an episode, so a rewind over a spike leaves them near the old level.
        """
        st = dict(state)
        gone = []
        st["last"] = min(st["last"], to_step)
        ep = st.get("ep")
        if ep is not None and ep["start"] > to_step:
            gone.append(anomaly(self.kind, self.metric, ep))
            st["ep"] = None
        eps = st.get("eps")
        if eps:
            keep = {}
            for k, e in eps.items():
                if e["start"] > to_step:
                    gone.append(anomaly(self.kind, self.metric, e))
                else:
                    keep[k] = e
            st["eps"] = keep
        self.forget(st, to_step)
        return st, gone

    def forget(self, st: dict, to_step: int) -> None:
        """Detector-specific part of a rewind; `st` is already a copy. By default: a run of points counted
        towards opening ("streak" since step "since") that began after `to_step` never happened."""
        if st.get("since") is not None and st["since"] > to_step:
            st["streak"], st["since"] = 0, None


def robust_ema(level: float, dev: float, x: float, a: float, clip: float, trend: float = 0.0,
               b: float = 0.0) -> tuple[float, float, float]:
    """One step of an EMA level (with an optional trend: Holt's method, gain `b`) and an EMA absolute deviation
    of the residuals, the residual clipped at `clip`. Returns (level, dev, trend).

    Clipping is what makes it robust: one outlier moves the level by at most a·clip, and a lasting shift is
    still absorbed because the deviation (and so the clip) grows geometrically while it lasts. The trend keeps a
    falling loss from leaving the level behind, which would inflate the deviation with lag and hide spikes.
    """
    pred = level + trend
    r = x - pred
    rc = clip if r > clip else -clip if r < -clip else r
    return pred + a * rc, dev + a * (min(abs(r), clip) - dev), trend + a * b * rc


@dataclass(frozen=True)
class SpikeDetector(SeriesDetector):
    """A value far above its expected level, or far above the previous logged value (positive series).

    Works on log(value): losses and norms vary multiplicatively, so a spread in log units means the same at
    loss 10 and at loss 2, and a heavy right tail (grad norms) is tamed.
    """

    kind: str = "loss_spike"
    metric: str = ""
    alpha: float = 0.1  # EMA weight per logged point: the level follows the last ~10 points
    beta: float = 0.1  # trend gain (Holt): the expected value follows a steadily falling curve without lag
    k: float = 8.0  # a spike is at least this many spreads (mean absolute deviations, ~0.8σ) above...
    min_ratio: float = 1.05  # ...and this many times it (a noise-free series has no spread to speak of)
    prev_ratio: float | None = 1.25  # this many times the previous value is a spike, even with one earlier point
    drift_ratio: float | None = 1.25  # this many times the slow level is a spike: a divergence climbing over
    #                                   tens of steps teaches the level and the spread too fast for the rule above
    alpha_slow: float = 0.01  # EMA weight of the slow level (no trend: a falling curve leaves it above)
    k_drift: float = 5.0  # ...and this many spreads above it (a very noisy series)
    cold: int = 3  # until this many points the spread is unknown: the prev rule needs no `k` spreads then
    warmup: int = 20  # points before the level rule may fire (the prev rule fires from the second point)
    clip: float = 3.0  # residuals clipped at clip·spread when the level learns
    floor: float = 0.002  # spread floor (log units: 0.2%)
    warn: float = 1.15  # ratio to the reference that makes it a warning / critical
    crit: float = 1.5
    settle: int = 100  # open this many points without recovering: a new level, accepted (the episode closes)

    def fresh(self) -> dict:
        return {"n": 0, "lvl": 0.0, "tr": 0.0, "dev": 0.0, "slow": 0.0, "prev": None, "pstep": None}

    def update(self, state: dict, step: int, x: float):
        st = self.advance(state, step)
        if st is None or x <= 0:  # a non-positive loss or norm has no log: nothing to judge
            return state, NO_EVENTS
        n, lvl, tr, dev, prev, pstep = st["n"], st["lvl"], st["tr"], st["dev"], st["prev"], st["pstep"]
        st["n"], st["prev"], st["pstep"] = n + 1, x, step
        lx = math.log(x)
        if n == 0:
            st["lvl"] = st["slow"] = lx
            return st, NO_EVENTS
        expect = lvl + tr
        spread = max(dev, self.floor)
        ep = st["ep"]
        if ep is not None:
            ref = ep["ref"]
            if x <= ref * (1 + (self.min_ratio - 1) / 2):  # back within half the margin: recovered
                st["ep"] = None
                events = close_ep(self.kind, self.metric, ep, step)
            elif ep["n"] + 1 >= self.settle:
                st.update(ep=None, lvl=lx, tr=0.0, slow=lx)
                return st, close_ep(self.kind, self.metric, ep, step)
            else:
                score = x / ref
                ep, events = peak_ep(self.kind, self.metric, ep, step, score, self._sev(score),
                                     self._why(x, step, score, ep["how"], ref))
                st["ep"] = {**ep, "n": ep["n"] + 1}
                return st, events
        else:
            ref = how = None
            if n >= self.warmup and lx - expect >= max(self.k * spread, math.log(self.min_ratio)):
                ref, how = math.exp(expect), "its running level"
            elif (self.drift_ratio and n >= self.warmup
                  and lx - st["slow"] >= max(math.log(self.drift_ratio), self.k_drift * spread)):
                ref, how = math.exp(st["slow"]), "its slow running level"
            if (self.prev_ratio and prev is not None and x >= prev * self.prev_ratio
                    and (n < self.cold or lx - math.log(prev) >= self.k * spread)
                    and (ref is None or prev < ref)):
                ref, how = prev, f"the previous value (step {pstep})"
            if ref is not None:
                score = x / ref
                # the level freezes while the episode lasts, so a spike never teaches it its own height
                st["ep"], events = open_ep(self.kind, self.metric, step, step, score, self._sev(score),
                                           self._why(x, step, score, how, ref), ref=ref, how=how, n=0)
                return st, events
            events = NO_EVENTS
        a = max(self.alpha, 1.0 / (n + 1))  # a plain running mean until the EMA window has filled
        # no clipping while warming up: the spread is still unknown, and early curves move fast (LR warmup)
        clip = self.clip * spread if n >= self.warmup else float("inf")
        st["lvl"], st["dev"], st["tr"] = robust_ema(lvl, dev, lx, a, clip, tr, self.beta)
        st["slow"] += max(self.alpha_slow, 1.0 / (n + 1)) * (lx - st["slow"])
        return st, events

    def forget(self, st: dict, to_step: int) -> None:
        if st["pstep"] is not None and st["pstep"] > to_step:
            st["prev"] = st["pstep"] = None  # the prev rule waits for the next point

    def _sev(self, score: float) -> str:
        return severity_for(score, self.warn, self.crit)

    def _why(self, x, step, score, how, ref) -> str:
        return f"{self.metric} {fmt(x)} at step {step} is {score:.2f}× {how} {fmt(ref)}"


@dataclass(frozen=True)
class ShiftDetector(SeriesDetector):
    """A sustained shift of a smoothed series against a slow robust baseline; blips of 1–2 points never count."""

    kind: str = "throughput_drop"
    metric: str = ""
    direction: int = -1  # -1: a drop is bad (tokens/s, MFU); +1: a rise is bad (step time, token drops)
    rel: float = 0.035  # smallest shift, relative to the baseline (a 5% regression clears it with margin)
    abs_min: float = 0.0  # and in the metric's own unit
    k: float = 4.0  # and in spreads of the smoothed series (a noisy host needs a bigger shift)
    sustain: int = 5  # consecutive smoothed points past the threshold before it opens
    win: int = 5  # smoothing: mean of the middle win-2 of the last `win` values, so 1–2 point blips vanish
    alpha: float = 0.02  # baseline EMA weight per point
    warmup: int = 10  # points before it may open (compilation, first-batch effects)
    crit: float = 0.25  # relative shift that makes it critical
    settle: int = 500  # open this long without recovering: the new level becomes the baseline

    def fresh(self) -> dict:
        return {"n": 0, "buf": [], "base": None, "nb": 0, "dev": 0.0, "streak": 0, "since": None}

    def update(self, state: dict, step: int, x: float):
        st = self.advance(state, step)
        if st is None:
            return state, NO_EVENTS
        buf = st["buf"] = (st["buf"] + [[step, x]])[-self.win:]
        n = st["n"] = st["n"] + 1
        if len(buf) < self.win:
            return st, NO_EVENTS
        vals = sorted(v for _, v in buf)
        y = sum(vals[1:-1]) / (len(vals) - 2) if len(vals) >= 3 else sum(vals) / len(vals)
        base = st["base"]
        if base is None:
            st["base"], st["nb"] = y, 1
            return st, NO_EVENTS
        dev = st["dev"]
        delta = self.direction * (y - base)
        thr = max(self.rel * abs(base), self.abs_min, self.k * dev)
        shift = delta / max(abs(base), self.abs_min, 1e-12)  # a zero baseline (no drops at all) stays finite
        ep = st["ep"]
        if ep is not None:
            if delta < thr / 2:
                st.update(ep=None, streak=0, since=None)
                return st, close_ep(self.kind, self.metric, ep, step)
            if ep["n"] + 1 >= self.settle:
                st.update(ep=None, streak=0, since=None, base=y)
                return st, close_ep(self.kind, self.metric, ep, step)
            ep, events = peak_ep(self.kind, self.metric, ep, step, shift, self._sev(shift),
                                 self._why(y, base, shift, ep["n"] + 1 + self.sustain, ep["start"]))
            st["ep"] = {**ep, "n": ep["n"] + 1}
            return st, events
        if n >= self.warmup and delta >= thr:
            # the baseline holds still while a shift may be starting, so it cannot absorb the shift itself
            streak = st["streak"] = st["streak"] + 1
            if streak == 1:
                st["since"] = buf[len(buf) // 2][0]  # the smoothed value crosses about half a window late
            if streak >= self.sustain:
                st["ep"], events = open_ep(self.kind, self.metric, step, st["since"], shift, self._sev(shift),
                                           self._why(y, base, shift, streak, st["since"]), n=0)
                return st, events
            return st, NO_EVENTS
        st["streak"], st["since"] = 0, None
        nb = st["nb"] = st["nb"] + 1
        a = max(self.alpha, 1.0 / nb)
        st["base"], st["dev"], _ = robust_ema(base, dev, y, a, max(3 * dev, self.rel * abs(base), self.abs_min))
        return st, NO_EVENTS

    def forget(self, st: dict, to_step: int) -> None:
        st["buf"] = [p for p in st["buf"] if p[0] <= to_step]
        super().forget(st, to_step)

    def _sev(self, shift: float) -> str:
        return CRITICAL if shift >= self.crit else WARNING

    def _why(self, y, base, shift, points, since) -> str:
        way = "below" if self.direction < 0 else "above"
        return (f"{self.metric} {fmt(y)} is {100 * shift:.1f}% {way} its baseline {fmt(base)} "
                f"for {points} points since step {since}")


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
    """A dynamic loss scale that keeps halving without growing back: repeated fp16 overflows."""

    kind: str = "overflow"
    metric: str = ""
    halvings: int = 3  # falls without a rise in between before it opens...
    within: int = 200  # ...all within this many steps (an isolated overflow every few thousand steps is normal)
    fall: float = 0.75  # a value below fall × the previous one is a fall

    def fresh(self) -> dict:
        return {"prev": None, "streak": 0, "since": None}  # streak: falls since `since`

    def update(self, state: dict, step: int, x: float):
        st = self.advance(state, step)
        if st is None:
            return state, NO_EVENTS
        prev, st["prev"] = st["prev"], x
        ep = st["ep"]
        if prev is None:
            return st, NO_EVENTS
        if x > prev:
            st["streak"], st["since"], st["ep"] = 0, None, None
            return st, close_ep(self.kind, self.metric, ep, step) if ep is not None else NO_EVENTS
        if x >= prev * self.fall:
            return st, NO_EVENTS
        if st["since"] is None or step - st["since"] > self.within and ep is None:
            st["streak"], st["since"] = 0, step
        falls = st["streak"] = st["streak"] + 1
        if falls < self.halvings:
            return st, NO_EVENTS
        sev = CRITICAL if falls >= 2 * self.halvings else WARNING
        why = f"{self.metric} fell {falls} times since step {st['since']} without growing back: now {fmt(x)}"
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
