"""Stalls (no step for much longer than usual while the heartbeat lives) and lost heartbeats.

These need wall time, so the detector stays pure by being told the time: `update(state, step, t)` when a step
arrives (t: the step's own timestamp, the `t` of its metrics message), and `update_time(state, now, ...)` on a
timer (ingest's loop, a periodic job) or, offline, before each row. All times are seconds on one clock: pass
`since_step_s` from the trainer's heartbeat when there is one, so ingest lag and clock skew do not matter.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from observatory import contract
from observatory.anomalies.detectors import NO_EVENTS, SeriesDetector
from observatory.anomalies.model import CRITICAL, RANK, WARNING, anomaly, close_ep, open_ep, peak_ep

STALL, HEARTBEAT_LOST = "stall", "heartbeat_lost"
HEARTBEAT = "heartbeat"  # the metric name heartbeat_lost anomalies carry (the heartbeat is not a series)


@dataclass(frozen=True)
class StallDetector(SeriesDetector):
    kind: str = STALL
    metric: str = contract.M_STEP_TIME
    k: float = 10.0  # no new step for k × the median interval between logged steps...
    min_s: float = 30.0  # ...and at least this long (checkpoint saves, evals and GC pauses are not stalls)
    heartbeat_timeout_s: float = float(contract.HEARTBEAT_TTL_S)  # the heartbeat key's TTL: older is lost
    keep: int = 15  # intervals kept for the median
    min_intervals: int = 3
    running: tuple[str, ...] = ("training",)  # phases where no progress is a stall (not paused, compiling...)

    def fresh(self) -> dict:
        return {"t": None, "iv": [], "hb": None}

    def update(self, state: dict, step: int, t: float):
        """A step arrived; `t` is its timestamp. Closes an open stall."""
        st = self.advance(state, step)
        if st is None:
            return state, NO_EVENTS
        if st["t"] is not None and t > st["t"]:
            st["iv"] = (st["iv"] + [t - st["t"]])[-self.keep:]
        st["t"] = t
        ep = st["ep"]
        if ep is None:
            return st, NO_EVENTS
        st["ep"] = None
        return st, close_ep(STALL, self.metric, ep, step)

    def update_time(self, state: dict, now: float, since_step_s: float | None = None,
                    heartbeat_age_s: float | None = None, phase: str | None = None):
        """The clock moved. heartbeat_age_s: seconds since the last heartbeat (math.inf when there is none any
        more, None when unknown, e.g. offline); phase: the heartbeat's phase, None when unknown."""
        last = state["last"]
        if last < 0:
            return state, NO_EVENTS
        st, events = dict(state), []
        hb = st["hb"]
        lost = heartbeat_age_s is not None and heartbeat_age_s > self.heartbeat_timeout_s
        if lost:
            sev_score = heartbeat_age_s if heartbeat_age_s < float("inf") else 1e9
            why = (f"no heartbeat for {heartbeat_age_s:.0f} s (last step {last})" if heartbeat_age_s < float("inf")
                   else f"the heartbeat is gone (last step {last})")
            if hb is None:
                st["hb"], ev = open_ep(HEARTBEAT_LOST, HEARTBEAT, last, last, sev_score, CRITICAL, why)
                events += ev
            elif sev_score >= 2 * hb["score"]:  # an update per doubling, not one per timer tick
                st["hb"], ev = peak_ep(HEARTBEAT_LOST, HEARTBEAT, hb, last, sev_score, CRITICAL, why)
                events += ev
        elif hb is not None and heartbeat_age_s is not None:
            st["hb"] = None
            events += close_ep(HEARTBEAT_LOST, HEARTBEAT, hb, last)
        idle = since_step_s if since_step_s is not None else None if st["t"] is None else now - st["t"]
        if lost or idle is None or len(st["iv"]) < self.min_intervals or (phase is not None
                                                                           and phase not in self.running):
            return st, events
        med = statistics.median(st["iv"])
        thr = max(self.k * med, self.min_s)
        if idle <= thr:
            return st, events
        score = idle / med if med > 0 else idle
        sev = CRITICAL if idle >= 3 * thr else WARNING
        why = (f"no step for {idle:.0f} s after step {last} ({score:.0f}× the median interval "
               f"{med:.3g} s) while the heartbeat lives")
        ep = st["ep"]
        if ep is None:
            st["ep"], ev = open_ep(STALL, self.metric, last, last, score, sev, why)
            events += ev
        elif score >= 2 * ep["score"] or RANK[sev] > RANK[ep["severity"]]:
            st["ep"], ev = peak_ep(STALL, self.metric, ep, last, score, sev, why)
            events += ev
        return st, events

    def rewind(self, state: dict, to_step: int):
        st, gone = super().rewind(state, to_step)
        if st["hb"] is not None and st["hb"]["start"] > to_step:
            gone.append(anomaly(HEARTBEAT_LOST, HEARTBEAT, st["hb"]))
            st["hb"] = None
        st["t"] = None  # the next step comes from a restarted trainer: its gap is no interval
        return st, gone
