"""Spikes of a positive series (losses, norms) against its running level, its previous value, its slow level,
(multi-step climbs) its level before the climb began, and (coarse logs) the value before a run of rises."""

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

    The rise rule knows nothing of steps, only of logged points, so it reads a log written every k steps as it
    reads one written every step: `rise_n` rises in a row that add up to `rise_ratio` over the value before the
    first one and `k_rise` times the median absolute change between logged points before the rises (the run's own
    noise at its logging interval: the level's spread would not do, on a coarse log it still carries the early
    fall long after; with fewer than `rise_noise_min` changes known, the ratio alone). A divergence logged every 10
    steps (6.37, 6.60, 7.31, 9.12) has each point under the prev rule's 25% and too few points for a level.
    The burst rule is for norms while their level is unknown (the first `warmup` points of a log, however late in
    training it begins): `burst_ratio` times the lowest value logged so far. With `sustain` = 2 (norms), a spike
    that is back under `warn`× its reference at the next logged point stays info, and one that stays up (an
    explosion) takes its severity there: healthy runs have one-point grad-norm spikes of 2–7× (llm.c's GPT-2 124M;
    BLOOM's chronicle: "a few grad norm spikes so far", not incidents).
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
    rise_n: int | None = 3  # this many logged rises in a row...; None: no rise rule
    rise_ratio: float = 1.25  # ...adding up to this many times the value before them...
    k_rise: float = 8.0  # ...and this many times the median |change| between logged points before them
    rise_noise_n: int = 16  # changes kept for that median...
    rise_noise_min: int = 5  # ...and how many it needs
    burst_ratio: float | None = None  # cold (n < warmup): this many times the lowest value so far; None: no rule
    sustain: int = 1  # a single point's finding is info until this many logged points stand >= warn x the
    #                   reference (norms: a one-point spike that decays at once is routine in healthy runs)
    sustain_gap: int | None = None  # ...only where the point is at most this many steps after the one before it
    #                                 (a log of every step: one batch's loss; None: at any logging interval)

    def fresh(self) -> dict:
        return {"n": 0, "lvl": 0.0, "tr": 0.0, "dev": 0.0, "slow": 0.0, "prev": None, "pstep": None, "ring": [],
                "lxs": [], "rise": None, "lo": None, "dl": []}  # rise, dl: see _rise; lo: the lowest log value

    def update(self, state: dict, step: int, x: float):
        st = self.advance(state, step)
        if st is None or x <= 0:  # a non-positive loss or norm has no log: nothing to judge
            return state, NO_EVENTS
        n, lvl, tr, dev, prev, pstep = st["n"], st["lvl"], st["tr"], st["dev"], st["prev"], st["pstep"]
        st["n"], st["prev"], st["pstep"] = n + 1, x, step
        lx = math.log(x)
        rise = self._rise(st, step, lx, prev, pstep)
        lo = st.get("lo")
        st["lo"] = lx if lo is None else min(lo, lx)
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
                sev = self._sev(score, step < self.info_before or (ep.get("hush") and ep["n"] + 2 < self.sustain))
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
            if (ref is None and self.burst_ratio and n < self.warmup and lo is not None
                    and lx - lo >= math.log(self.burst_ratio)):
                ref, how = math.exp(lo), "the lowest value logged before it"
            climb = rose = False
            if self.climb_ratio and n >= self.warmup and (ref is None or self.point_info):
                cref, chow = self._climb(st, lx)
                if cref is not None:  # on a noisy series a climb outranks a single point (it is not quiet)
                    ref, how, climb = cref, chow, True
            if (not climb and (ref is None or self.point_info) and rise is not None
                    and lx - rise[1] >= max(math.log(self.rise_ratio), self._rise_noise(st, rise[0]))):
                ref, how, climb = math.exp(rise[1]), f"its value before {rise[0]} rises in a row (step {rise[3]})", True
                rose = True
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
                if rose:  # it began with the first rising point
                    start = rise[2]
                elif climb:  # the climb began with the window's first point
                    start = st["ring"][1 - self.climb_win][0] if self.climb_win > 1 else step
                point = self.point_info and not climb
                hush = (self.sustain > 1 and not climb and not how.startswith("the lowest")
                        and (self.sustain_gap is None or (pstep is not None and step - pstep <= self.sustain_gap)))
                if point:  # the level does not learn it, but a climb's window counts it (the next point may be one)
                    self._remember(st, step, expect, spread, lx)
                else:
                    st["ring"], st["lxs"] = [], []  # a later climb is measured from a level learned after this one
                st["rise"] = None
                st["ep"], events = open_ep(self.kind, self.metric, step, start, score,
                                           self._sev(score, step < self.info_before or point or hush),
                                           self._why(x, step, score, how, ref), ref=ref, how=how, n=0, point=point,
                                           hush=hush)
                return st, [*closed, *events]
            events = closed
        a = max(self.alpha, 1.0 / (n + 1))  # a plain running mean until the EMA window has filled
        # no clipping while warming up: the spread is still unknown, and early curves move fast (LR warmup)
        clip = self.clip * spread if n >= self.warmup else float("inf")
        st["lvl"], st["dev"], st["tr"] = robust_ema(lvl, dev, lx, a, clip, tr, self.beta)
        st["slow"] += max(self.alpha_slow, 1.0 / (n + 1)) * (lx - st["slow"])
        self._remember(st, step, expect, spread, lx)
        return st, events

    def _rise(self, st: dict, step: int, lx: float, prev: float | None, pstep: int | None) -> list | None:
        """Counts logged rises in a row: [count, log value before the first, step of the first, step before it],
        returned once there are `rise_n` of them (None before, or with no rise rule); keeps the last absolute
        changes between logged points ("dl"). Only points outside an episode count."""
        if not self.rise_n or st["ep"] is not None or prev is None:
            st["rise"] = None
            return None
        st["dl"] = (st.get("dl", []) + [round(abs(lx - math.log(prev)), 5)])[-(self.rise_noise_n + self.rise_n):]
        r = st.get("rise")
        if lx <= math.log(prev):
            st["rise"] = None
        elif r is None:
            st["rise"] = r = [1, math.log(prev), step, pstep]
        else:
            st["rise"] = r = [r[0] + 1, *r[1:]]
        return r if r is not None and r[0] >= self.rise_n else None

    def _rise_noise(self, st: dict, rises: int) -> float:
        """k_rise × the median absolute change between logged points before the last `rises` (0: too few)."""
        before = st.get("dl", [])[:-rises][-self.rise_noise_n:]
        if len(before) < self.rise_noise_min:
            return 0.0
        return self.k_rise * sorted(before)[len(before) // 2]

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
            st["dl"] = []  # the changes between logged points are learned again from the surviving ones on
        if st.get("ring") and st["ring"][-1][0] > to_step:
            st["ring"], st["lxs"] = [], []  # the climb rule waits for a full ring of surviving points
        if st.get("rise") and st["rise"][2] > to_step:
            st["rise"] = None  # rises after to_step never happened (and the point before them is gone)

    def _sev(self, score: float, quiet: bool = False) -> str:
        return INFO if quiet else severity_for(score, self.warn, self.crit)

    def _why(self, x, step, score, how, ref) -> str:
        return f"{self.metric} {fmt(x)} at step {step} is {score:.2f}× {how} {fmt(ref)}"
