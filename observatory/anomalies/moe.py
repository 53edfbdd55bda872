"""Mixture-of-Experts detectors over one layer's per-expert series: hot/dead experts, router-bias runaway.

The registry publishes vectors per element (`.../routing_hist/<e>`, `.../router_bias/<e>`), so these detectors
take one layer's values of a step at once, as {expert: value}; the Monitor groups them. State is O(experts).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Mapping

from observatory.anomalies.detectors import NO_EVENTS, SeriesDetector
from observatory.anomalies.model import CRITICAL, WARNING, close_ep, fmt, open_ep, peak_ep

HOT, DEAD = "hot_expert", "dead_expert"


@dataclass(frozen=True)
class ExpertLoadDetector(SeriesDetector):
    """An expert whose share of the layer's assignments stays far from 1/E for many points."""

    kind: str = "expert_load"
    metric: str = ""  # router_metric(layer, "routing_hist"); an episode names `<metric>/<e>`
    layer: int = 0
    hot: float = 2.5  # load over the mean load (1 = fair share) at which an expert is hot...
    hot_close: float = 1.8  # ...and below which it has cooled down (hysteresis against flapping)
    dead: float = 0.1  # the same for a dead (starved) expert
    dead_close: float = 0.25
    sustain: int = 50  # consecutive points out of band before it opens: routing is noisy step to step, and an
    #                    expert the bias is still pulling back in lasts tens of steps
    warmup: int = 300  # points before it may open: the router starts unbalanced and aux-loss-free balancing
    #                    (the demo's bias rate 1e-2) takes a few hundred steps to even the load out
    crit_hot: float = 6.0

    def fresh(self) -> dict:
        return {"n": 0, "streak": [], "since": [], "eps": {}}

    def update(self, state: dict, step: int, loads: Mapping[int, float]):
        st = self.advance(state, step)
        if st is None:
            return state, NO_EVENTS
        st["n"] += 1
        total = sum(loads.values())
        if total <= 0 or len(loads) < 2:
            return st, NO_EVENTS
        n_exp = len(loads)
        size = max(loads) + 1
        streak, since = list(st["streak"]), list(st["since"])
        if len(streak) < size:
            streak += [0] * (size - len(streak))
            since += [None] * (size - len(since))
        eps, events = st["eps"], []
        for e, load in loads.items():
            rel = load * n_exp / total
            ep = eps.get(str(e))
            if ep is not None:
                hot = ep["kind"] == HOT
                if (rel < self.hot_close) if hot else (rel > self.dead_close):
                    eps = {k: v for k, v in eps.items() if k != str(e)}
                    streak[e], since[e] = 0, None
                    events += close_ep(ep["kind"], ep["metric"], ep, step)
                    continue
                score = rel if hot else 1 - rel
                new, ev = peak_ep(ep["kind"], ep["metric"], ep, step, score, self._sev(hot, rel),
                                  self._why(e, rel, n_exp, step, ep["start"]))
                if ev:
                    eps = {**eps, str(e): new}
                    events += ev
                continue
            s = streak[e]
            s = (s + 1 if s > 0 else 1) if rel >= self.hot else (s - 1 if s < 0 else -1) if rel <= self.dead else 0
            if s in (1, -1):
                since[e] = step
            streak[e] = s
            if abs(s) >= self.sustain and st["n"] > self.warmup:
                hot = s > 0
                ep, ev = open_ep(HOT if hot else DEAD, self.metric, step, since[e], rel if hot else 1 - rel,
                                 self._sev(hot, rel), self._why(e, rel, n_exp, step, since[e]),
                                 kind=HOT if hot else DEAD, metric=f"{self.metric}/{e}")
                eps = {**eps, str(e): ep}
                events += ev
        st.update(streak=streak, since=since, eps=eps)
        return st, events

    def forget(self, st: dict, to_step: int) -> None:
        gone = [s is not None and s > to_step for s in st["since"]]
        st["since"] = [None if g else s for g, s in zip(gone, st["since"])]
        st["streak"] = [0 if g else k for g, k in zip(gone, st["streak"])]

    def _sev(self, hot: bool, rel: float) -> str:
        return CRITICAL if hot and rel >= self.crit_hot else WARNING

    def _why(self, e: int, rel: float, n_exp: int, step: int, since: int) -> str:
        return (f"expert {e} of layer {self.layer} gets {rel:.2f}× its fair share (1/{n_exp}) at step {step}, "
                f"out of band since step {since}")


@dataclass(frozen=True)
class RouterBiasDetector(SeriesDetector):
    """An expert's router bias moving one way at a steady pace while the rest of its layer holds still.

    With aux-loss-free balancing every bias moves early, then levels off and jitters once the load balances; a
    runaway one (an expert that gets no tokens whatever its bias) keeps moving at the update rate for ever. So,
    at every window's end, over the last `rises` window-to-window moves: one sign, each at least `outlier` times
    the layer's median move (the whole layer moving together is the early phase, not a runaway), and the latest
    at least `keep_pace` of the first (not levelling off), adding up to a real change of the bias (`grow`), and
    away from zero (|bias| larger at the end: an expert that was overloaded early and whose bias climbs back from far
    below zero to level off above it is balancing, not running away — a demo run did exactly that over 300 steps).
    """

    kind: str = "router_bias_runaway"
    metric: str = ""  # router_metric(layer, "router_bias"); an episode names `<metric>/<e>`
    layer: int = 0
    window: int = 50  # points per window: a snapshot of the layer's biases is kept at each window's end
    rises: int = 5  # consecutive same-sign moves (250 points: an early approach to balance is shorter)
    keep_pace: float = 0.75
    outlier: float = 3.0
    grow: float = 0.2  # and the moves add up to this fraction of its |bias| (or the layer's median |bias|)
    warmup: int = 100  # points before the first snapshot (the biases start at zero and move fast)

    def fresh(self) -> dict:
        return {"n": 0, "hist": [], "eps": {}}

    def update(self, state: dict, step: int, biases: Mapping[int, float]):
        st = self.advance(state, step)
        if st is None or not biases:
            return state, NO_EVENTS
        n = st["n"] = st["n"] + 1
        if n < self.warmup or (n - self.warmup) % self.window:
            return st, NO_EVENTS
        size = max(biases) + 1
        vec = [biases.get(e, 0.0) for e in range(size)]
        hist = st["hist"] = (st["hist"] + [[step, vec]])[-(self.rises + 1):]
        if len(hist) <= self.rises or any(len(h[1]) != size for h in hist):
            return st, NO_EVENTS
        eps, events = dict(st["eps"]), []
        moves_by_window = [[y - x for x, y in zip(a[1], b[1])] for a, b in zip(hist, hist[1:])]
        typical = [statistics.median(abs(m) for m in w) for w in moves_by_window]
        median_bias = statistics.median(abs(b) for b in hist[0][1])
        for e in range(size):
            moves = [w[e] for w in moves_by_window]
            ep = eps.get(str(e))
            if ep is not None:
                if moves[-1] * ep["sign"] <= 0:  # stopped (or turned): no longer running away
                    del eps[str(e)]
                    events += close_ep(self.kind, ep["metric"], ep, step)
                else:
                    eps[str(e)], ev = peak_ep(self.kind, ep["metric"], ep, step, abs(vec[e]), WARNING,
                                              self._why(e, hist, ep["start"]))
                    events += ev
                continue
            sign = 1.0 if moves[0] > 0 else -1.0
            alone = all(m * sign > self.outlier * t for m, t in zip(moves, typical))
            if (alone and abs(moves[-1]) >= self.keep_pace * abs(moves[0])
                    and abs(vec[e]) > abs(hist[0][1][e])  # away from zero: a bias coming back is balancing
                    and abs(sum(moves)) >= self.grow * max(abs(hist[0][1][e]), median_bias)):
                eps[str(e)], ev = open_ep(self.kind, self.metric, step, hist[0][0], abs(vec[e]), WARNING,
                                          self._why(e, hist, hist[0][0]), metric=f"{self.metric}/{e}", sign=sign)
                events += ev
        st["eps"] = eps
        return st, events

    def forget(self, st: dict, to_step: int) -> None:
        st["hist"] = [h for h in st["hist"] if h[0] <= to_step]
        st["n"] = self.warmup + len(st["hist"]) * self.window - 1 if st["hist"] else 0

    def _why(self, e: int, hist: list, since: int) -> str:
        return (f"router bias of expert {e} in layer {self.layer} keeps moving one way: "
                f"{fmt(hist[0][1][e])} at step {hist[0][0]} → {fmt(hist[-1][1][e])} at step {hist[-1][0]}, "
                f"running away since step {since}")
