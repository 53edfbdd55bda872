"""Non-finite values (NaN, ±Inf) on any metric: one critical episode per divergence, not one per series.

A diverged step turns the loss, every gradient norm and the update norm non-finite at once; one anomaly naming
the most telling metric and counting the rest is what a reader wants. Hardware readings are independent sensors,
so each `hw/` metric gets its own episode. An episode closes once every metric it saw go non-finite has been
reported finite again (a metric logged every 10 steps keeps it open until its next point).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

from observatory import contract
from observatory.anomalies.detectors import NO_EVENTS, SeriesDetector
from observatory.anomalies.model import CRITICAL, close_ep, open_ep, peak_ep

# Which non-finite metric names the episode: the loss first, then what caused it, then any other by name.
_PRIORITY = {name: i for i, name in enumerate((contract.M_LOSS, contract.M_CE, contract.M_GRAD_NORM,
                                                contract.M_UPDATE_NORM, contract.M_EVAL_LOSS))}
RUN_GROUP = "run"


def _what(x: float) -> str:
    return "NaN" if math.isnan(x) else "+Inf" if x > 0 else "-Inf"


@dataclass(frozen=True)
class NonFiniteDetector(SeriesDetector):
    kind: str = "nonfinite"
    metric: str = "*"
    own_episode: tuple[str, ...] = ("hw/",)  # prefixes of independent sensors: an episode per metric
    max_pending: int = 512  # bounds the state; past it, the episode closes on the named metrics alone

    def fresh(self) -> dict:
        return {"eps": {}}

    def group(self, name: str) -> str:
        return name if name.startswith(self.own_episode) else RUN_GROUP

    def update(self, state: dict, step: int, values: Mapping[str, float], bad: Sequence[str] | None = None):
        """`bad`: the names in `values` that are non-finite, when the caller already knows them."""
        if step < state["last"]:  # the same step may come in two messages (train, then eval metrics)
            return state, NO_EVENTS
        if bad is None:
            bad = [n for n, v in values.items() if not math.isfinite(v)]
        eps = state["eps"]
        if not bad and not eps:
            return state if step == state["last"] else {**state, "last": step}, NO_EVENTS
        eps = dict(eps)
        events = []
        grouped: dict[str, list[str]] = {}
        for name in bad:
            grouped.setdefault(self.group(name), []).append(name)
        for g, names in grouped.items():
            names.sort(key=lambda n: (_PRIORITY.get(n, len(_PRIORITY)), n))
            ep = eps.get(g)
            if ep is None:
                first = names[0]
                ep, ev = open_ep(self.kind, first, step, step, float(len(names)), CRITICAL,
                                 self._why(first, values[first], step, names), metric=first,
                                 pending=names[: self.max_pending])
            else:
                new = [n for n in names if n not in ep["pending"]]
                if not new:
                    continue
                pending = (ep["pending"] + new)[: self.max_pending]
                ep, ev = peak_ep(self.kind, ep["metric"], ep, step, ep["score"] + len(new), CRITICAL,
                                 self._why(ep["metric"], math.nan, ep["start"], pending, step),
                                 pending=pending)
            eps[g] = ep
            events += ev
        bad_set = set(bad) if grouped else ()
        for g, ep in list(eps.items()):
            pending = [n for n in ep["pending"] if n in bad_set or n not in values]
            if pending:
                if len(pending) != len(ep["pending"]):
                    eps[g] = {**ep, "pending": pending}
                continue
            del eps[g]
            events += close_ep(self.kind, ep["metric"], ep, step)
        return {**state, "last": step, "eps": eps}, events

    def _why(self, first: str, x: float, step: int, names: Sequence[str], now: int | None = None) -> str:
        head = (f"{first} is {_what(x)} at step {step}" if now is None
                else f"{first} non-finite since step {step}")
        if len(names) > 1:
            shown = ", ".join(n for n in names[1:4])
            head += f" (and {len(names) - 1} more: {shown}{', …' if len(names) > 4 else ''})"
        return head + (f", still at step {now}" if now is not None else "")
