"""Spikes of a positive series (losses, norms) against its running level, its previous value, its slow level, and
(multi-step climbs) its level before the climb began."""

from __future__ import annotations

import math
from dataclasses import dataclass

from observatory.anomalies.base import NO_EVENTS, SeriesDetector, robust_ema
from observatory.anomalies.model import INFO, close_ep, fmt, open_ep, peak_ep, severity_for


@dataclass(frozen=True)
class SpikeDetector(SeriesDetector):
    """A value far above its expected level, or far above the previous logged value (positive series), or a
    climb over a few points far above the level that held before it.

    Works on log(value): losses and norms vary multiplicatively, so a spread in log units means the same at
    loss 10 and at loss 2, and a heavy right tail (grad norms) is tamed.

    The climb rule catches what an LR spike does to a loss: it rises by half over 4–7 steps, each step hidden in
    5% noise, while the level and the spread learn the first steps of the climb (the spread grows ~20% a step
    while residuals hit the clip), so no single point stands out. It compares the mean of the last `climb_win`
    log values with the expectation and spread as they stood `climb_span` points ago, before the climb began:
    O(climb_span) state (a ring of (step, expectation, spread)), and the mean of `climb_win` points has half the
    noise of one, so a threshold of `k_climb` spreads there is as strict as 2·k_climb for one point.
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
    climb_ratio: float | None = 1.2  # the mean of the last climb_win points this many times the old level...
    k_climb: float = 4.0  # ...and this many (old) spreads above it; None: no climb rule
    climb_win: int = 4
    climb_span: int = 8  # the old level: the expectation this many points ago (before a climb of ≤ 7 steps)
    point_info: bool = False  # single-point findings are info (a noisy series: per-domain losses of a few
    #                           sequences each); climbs keep their severity
    info_before: int = 0  # every finding before this step is info (early training's rough start, LR warmup)

    def fresh(self) -> dict:
        return {"n": 0, "lvl": 0.0, "tr": 0.0, "dev": 0.0, "slow": 0.0, "prev": None, "pstep": None, "ring": [],
                "lxs": []}

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
        ep, closed = st["ep"], NO_EVENTS
        if ep is not None and ep.get("point"):  # a noisy series' one-point finding: over at the next point
            st["ep"], closed, ep = None, close_ep(self.kind, self.metric, ep, step), None
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
                sev = self._sev(score, step < self.info_before)
                ep, events = peak_ep(self.kind, self.metric, ep, step, score, sev,
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
            climb = False
            if self.climb_ratio and n >= self.warmup and (ref is None or self.point_info):
                cref, chow = self._climb(st, lx)
                if cref is not None:  # on a noisy series a climb outranks a single point (it is not quiet)
                    ref, how, climb = cref, chow, True
            # once there is a level, the jump from the previous value must also leave the level behind: a rise
            # back from a low outlier (an easy batch) is not a spike, however far it is above that outlier
            if (self.prev_ratio and prev is not None and x >= prev * self.prev_ratio
                    and (n < self.cold or (lx - math.log(prev) >= self.k * spread
                                           and lx - expect >= self.k / 2 * spread))
                    and (ref is None or prev < ref) and not (climb and self.point_info)):
                ref, how, climb = prev, f"the previous value (step {pstep})", False
            if ref is not None:
                score = x / ref
                # the level freezes while the episode lasts, so a spike never teaches it its own height
                start = step
                if climb:  # the climb began with the window's first point
                    start = st["ring"][1 - self.climb_win][0] if self.climb_win > 1 else step
                point = self.point_info and not climb
                if point:  # the level does not learn it, but a climb's window counts it (the next point may be one)
                    self._remember(st, step, expect, spread, lx)
                else:
                    st["ring"], st["lxs"] = [], []  # a later climb is measured from a level learned after this one
                st["ep"], events = open_ep(self.kind, self.metric, step, start, score,
                                           self._sev(score, step < self.info_before or point),
                                           self._why(x, step, score, how, ref), ref=ref, how=how, n=0, point=point)
                return st, [*closed, *events]
            events = closed
        a = max(self.alpha, 1.0 / (n + 1))  # a plain running mean until the EMA window has filled
        # no clipping while warming up: the spread is still unknown, and early curves move fast (LR warmup)
        clip = self.clip * spread if n >= self.warmup else float("inf")
        st["lvl"], st["dev"], st["tr"] = robust_ema(lvl, dev, lx, a, clip, tr, self.beta)
        st["slow"] += max(self.alpha_slow, 1.0 / (n + 1)) * (lx - st["slow"])
        self._remember(st, step, expect, spread, lx)
        return st, events

    def _remember(self, st: dict, step: int, expect: float, spread: float, lx: float) -> None:
        if self.climb_ratio:  # what held before this point, and the point itself, for the climb rule
            st["ring"] = (st.get("ring", []) + [[step, expect, spread]])[-self.climb_span:]
            st["lxs"] = (st.get("lxs", []) + [lx])[-self.climb_win:]

    def _climb(self, st: dict, lx: float) -> tuple[float | None, str | None]:
        """(reference, how) when the last climb_win points (this one included) stand far above the expectation
        of climb_span points ago; (None, None) otherwise, or while the ring is still filling."""
        ring, lxs = st.get("ring", []), st.get("lxs", [])
        if len(ring) < self.climb_span or len(lxs) < self.climb_win - 1:
            return None, None
        pstep, old, spread = ring[0]
        window = lxs[len(lxs) - self.climb_win + 1:] + [lx]
        need = max(math.log(self.climb_ratio), self.k_climb * spread)
        if sum(window) / len(window) - old >= need and lx - old >= need:  # risen, and still up now
            return math.exp(old), f"its level before the climb (step {pstep})"
        return None, None

    def forget(self, st: dict, to_step: int) -> None:
        if st["pstep"] is not None and st["pstep"] > to_step:
            st["prev"] = st["pstep"] = None  # the prev rule waits for the next point
        if st.get("ring") and st["ring"][-1][0] > to_step:
            st["ring"], st["lxs"] = [], []  # the climb rule waits for a full ring of surviving points

    def _sev(self, score: float, quiet: bool = False) -> str:
        return INFO if quiet else severity_for(score, self.warn, self.crit)

    def _why(self, x, step, score, how, ref) -> str:
        return f"{self.metric} {fmt(x)} at step {step} is {score:.2f}× {how} {fmt(ref)}"
