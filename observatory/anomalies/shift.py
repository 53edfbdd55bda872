"""Sustained level shifts of a smoothed series (throughput, step time, token drops) against a slow baseline; with
`host=True` a shift that opens while other processes take the CPU is the host's: one `host_contention` notice
(info, from the step-time detector; the throughput detectors stay silent), not a training anomaly. How:
docs/ANOMALIES.md "Level shifts and the host's CPU".
"""

from __future__ import annotations

from dataclasses import dataclass

from observatory.anomalies.base import NO_EVENTS, SeriesDetector, robust_ema
from observatory.anomalies.model import CRITICAL, INFO, WARNING, close_ep, fmt, open_ep, peak_ep

VALUE, HOST_CPU, PROC_CPU, TIME = "x", "cpu", "proc", "t"  # the members of a host-aware detector's group
HOST_NOTE = "the host, not the run: "  # a host_contention notice's explanation starts with it


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
    host: bool = False  # read the host's CPU readings too (grouped input, see the module's docstring)
    contention: float = 0.8  # the trainer's CPU share below this fraction of its usual: other processes compete
    saturated: float = 90.0  # or the host's CPU this busy (%) while the trainer holds less than one core's worth
    #                          of it (proc/cpu < 1: less than 1/cores of the busy CPU): contended from the start
    alpha_share: float = 0.05  # EMA weight of the usual share, per hardware reading outside a shift
    min_s: float = 5.0  # wall time a shift must also last before it opens (when the group carries "t")
    # A shift that opens while other processes take the CPU is the host's, not the run's: the step-time detector
    # tells it as one `host_contention` notice (info); the throughput ones, which see the same slowdown, keep
    # quiet (silent=True), so one contended stretch is one notice, never a training anomaly.
    host_kind: str = "host_contention"
    silent: bool = False

    def fresh(self) -> dict:
        return {"n": 0, "buf": [], "base": None, "nb": 0, "dev": 0.0, "streak": 0, "since": None,
                "share": None, "share_base": None, "busy": False}

    def update(self, state: dict, step: int, x):
        if self.host:
            return self._update_host(state, step, x)
        return self._update(state, step, x)

    def _update_host(self, state: dict, step: int, group: dict):
        cpu, proc = group.get(HOST_CPU), group.get(PROC_CPU)
        x, t = group.get(VALUE), group.get(TIME)
        if cpu is None or proc is None or cpu <= 0:
            return self._update(state, step, x, t) if x is not None else (state, NO_EVENTS)
        st = {**state, "share": proc / cpu, "cpu": cpu}
        calm = st["ep"] is None and not st["streak"]
        if calm:  # the usual share is learned outside shifts only, as the baseline is
            sb = st.get("share_base")
            st["share_base"] = st["share"] if sb is None else sb + self.alpha_share * (st["share"] - sb)
        st["busy"] = st.get("busy", False) and not calm or self._contended(st)
        if st["busy"] and st.get("share_base") is not None:  # the lowest share while it lasts, for the explanation
            # (a host saturated before any usual share was learned, outside shifts: busy, with no share to compare)
            low = st["share"] / max(st["share_base"], 1e-9)
            st["low"] = low if st.get("low") is None else min(st["low"], low)
        elif calm:
            st["low"] = None
        return self._update(st, step, x, t) if x is not None else (st, NO_EVENTS)

    def _contended(self, st: dict) -> bool:
        sb, share = st.get("share_base"), st.get("share")
        if share is None:
            return False
        return (sb is not None and share < self.contention * sb) or (st.get("cpu", 0.0) >= self.saturated
                                                                      and share < 1.0)

    def _update(self, state: dict, step: int, x: float, t: float | None = None):
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
        if ep is not None and ep.get("silent"):  # the host's slowdown, told by the step-time detector
            if delta < thr / 2 or ep["n"] + 1 >= self.settle:
                st.update(ep=None, streak=0, since=None, busy=False, **({"base": y} if delta >= thr / 2 else {}))
            else:
                st["ep"] = {**ep, "n": ep["n"] + 1}
            return st, NO_EVENTS
        if ep is not None:
            if delta < thr / 2:
                st.update(ep=None, streak=0, since=None, busy=False)
                return st, close_ep(self.kind, self.metric, ep, step)
            if ep["n"] + 1 >= self.settle:
                st.update(ep=None, streak=0, since=None, base=y, busy=False)
                return st, close_ep(self.kind, self.metric, ep, step)
            host = ep.get("host", False) or st.get("busy", False)
            why = self._why(y, base, shift, ep["n"] + 1 + self.sustain, ep["start"], st if host else None)
            if ep.get("kind") == self.host_kind:
                why = HOST_NOTE + why
            ep, events = peak_ep(self.kind, self.metric, ep, step, shift, self._sev(shift, host), why, host=host)
            st["ep"] = {**ep, "n": ep["n"] + 1}
            return st, events
        if n >= self.warmup and delta >= thr:
            # the baseline holds still while a shift may be starting, so it cannot absorb the shift itself
            streak = st["streak"] = st["streak"] + 1
            if streak == 1:
                st["since"] = buf[len(buf) // 2][0]  # the smoothed value crosses about half a window late
                st["since_t"] = t
            long_enough = t is None or st.get("since_t") is None or t - st["since_t"] >= self.min_s
            if streak >= self.sustain and long_enough:
                host = st.get("busy", False)
                if host and self.silent:
                    st["ep"] = {"start": st["since"], "n": 0, "silent": True}
                    return st, NO_EVENTS
                why = self._why(y, base, shift, streak, st["since"], st if host else None)
                st["ep"], events = open_ep(self.kind, self.metric, step, st["since"], shift, self._sev(shift, host),
                                           HOST_NOTE + why if host else why, n=0, host=host,
                                           **({"kind": self.host_kind} if host else {}))
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

    def _sev(self, shift: float, host: bool = False) -> str:
        return INFO if host else CRITICAL if shift >= self.crit else WARNING

    def _why(self, y, base, shift, points, since, host: dict | None = None) -> str:
        way = "below" if self.direction < 0 else "above"
        why = (f"{self.metric} {fmt(y)} is {100 * shift:.1f}% {way} its baseline {fmt(base)} "
               f"for {points} points since step {since}")
        if host is not None and host.get("low") is not None:
            why += (f"; other processes compete for the CPU (host {fmt(host.get('cpu', 0.0))}% busy, the trainer's "
                    f"share of it at {100 * host['low']:.0f}% of usual)")
        return why
