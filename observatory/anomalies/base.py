"""What every per-series detector shares: a fresh state, idempotent stepping, forgetting after a rewind; and the
robust EMA that levels and spreads are learned with.

A detector object is immutable configuration for one series (its kind, metric name and thresholds); everything
that changes lives in `state`, a small JSON-able dict the caller keeps (and snapshots). `update` never mutates
the state it is given. Every state holds "last" (the newest step seen: older or repeated steps are ignored, so
re-delivered points are harmless) and "ep" (the open episode, or None).
"""

from __future__ import annotations

from observatory.anomalies.model import Anomaly, anomaly

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
            if not ep.get("silent"):  # (a silent episode was never told: nothing to supersede)
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
