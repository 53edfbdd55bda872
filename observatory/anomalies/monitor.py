"""The Monitor: one run's detectors, fed whole steps, holding all per-series state; snapshot, restore, rewind.

    m = Monitor()
    events = m.observe(step, values, t=msg_t)     # every metrics message, in step order
    events += m.tick(now, since_step_s=hb["since_step_s"], heartbeat_age_s=age, phase=hb["phase"])
    superseded = m.rewind(to_step)                 # on a `rewind` message
    m.set_forecast(m.forecast_band(registration))  # a verified pre-registered forecast: forecast_deviation
    blob = m.snapshot(); m2 = Monitor(); m2.restore(blob)   # json.dumps(blob) round-trips exactly

Events are (action, anomaly, at) with action opened/updated/closed/superseded; upsert on `anomaly.key`.
"""

from __future__ import annotations

from typing import Mapping

from observatory.anomalies.model import CLOSED, SUPERSEDED, Anomaly, Event, anomaly
from observatory.anomalies.routing import Config, plan
from observatory.anomalies.shift import TIME

SNAPSHOT_VERSION = 1


class Monitor:
    """Routes each metric of a step to its detectors by name (compiled once per name) and keeps their states.

    Feeding is idempotent per (series, step): a step a series has already seen is ignored, so re-delivered
    messages after a crash, or a snapshot older than the last fed step, never duplicate an anomaly.
    """

    def __init__(self, config: Config | None = None, keep_closed: int = 256):
        self.config = config or Config()
        self.keep_closed = keep_closed  # closed anomalies remembered so that a rewind can supersede them
        self._routes: dict[str, tuple] = {}  # name -> ((state key, detector, expert | None), ...)
        self._detectors: dict[str, object] = {}  # state key -> detector
        self._nonfinite = self.config.nonfinite
        self._stall = self.config.stall
        self._forecast = self.config.forecast
        self._reset()

    def _reset(self) -> None:
        self._states: dict[str, dict] = {}
        self._nf_state = self._nonfinite.init()
        self._stall_state = self._stall.init()
        self._fc_state = self._forecast.init()
        self._closed: list[dict] = []

    # ------------------------------------------------------------------------------------------ feeding
    def observe(self, step: int, values: Mapping[str, float], t: float | None = None) -> list[Event]:
        """One metrics message: `values` may be a subset of the series (sparse logging, eval every N steps).
        `t`: the step's timestamp in seconds (for stall detection); None to skip timing."""
        routes, states = self._routes, self._states
        events: list[Event] = []
        bad = None
        groups = None
        for name, v in values.items():
            r = routes.get(name)
            if r is None:
                r = self._compile(name)
            if v - v != 0:  # NaN or ±Inf (inf - inf is NaN); cheaper than math.isfinite per value
                if bad is None:
                    bad = []
                bad.append(name)
                continue
            for key, det, sub in r:
                if sub is None:
                    states[key], ev = det.update(states[key], step, v)
                    if ev:
                        events += ev
                else:
                    if groups is None:
                        groups = {}
                    groups.setdefault(key, {})[sub] = v
        if groups:
            for key, vec in groups.items():
                det = self._detectors[key]
                if t is not None and getattr(det, "host", False):
                    vec[TIME] = t  # a host-aware shift must also last long enough in wall time
                states[key], ev = det.update(states[key], step, vec)
                if ev:
                    events += ev
        if bad or self._nf_state["eps"]:
            self._nf_state, ev = self._nonfinite.update(self._nf_state, step, values, bad or ())
            events += ev
        if t is not None:
            self._stall_state, ev = self._stall.update(self._stall_state, step, t)
            events += ev
        if self._fc_state["band"] is not None:
            self._fc_state, ev = self._forecast.update(self._fc_state, step, values)
            events += ev
        if events:
            self._remember(events)
        return events

    def tick(self, now: float, since_step_s: float | None = None, heartbeat_age_s: float | None = None,
             phase: str | None = None) -> list[Event]:
        """The clock moved (call every few seconds): stalls and lost heartbeats. See StallDetector.update_time."""
        self._stall_state, events = self._stall.update_time(self._stall_state, now, since_step_s,
                                                             heartbeat_age_s, phase)
        if events:
            self._remember(events)
        return events

    def forecast_band(self, registration: dict) -> dict:
        """The compact band of a verified registration (observatory.scaling.registration); ValueError if unusable."""
        return self._forecast.band_of(registration)

    def set_forecast(self, band: dict | None) -> None:
        """Watch the live loss against this band (None: stop); the same forecast again changes nothing."""
        self._fc_state = self._forecast.set_band(self._fc_state, band)

    @property
    def forecast_sha(self) -> str | None:
        band = self._fc_state["band"]
        return band["sha"] if band else None

    def _compile(self, name: str) -> tuple:
        route = []
        for det, sub in plan(name, self.config):
            key = det.key
            if key not in self._detectors:
                self._detectors[key] = det
            if key not in self._states:
                self._states[key] = det.init()
            route.append((key, self._detectors[key], sub))
        self._routes[name] = route = tuple(route)
        return route

    def _remember(self, events: list[Event]) -> None:
        closed = [e.anomaly.to_dict() for e in events if e.action == CLOSED]
        if closed:
            self._closed = (self._closed + closed)[-self.keep_closed:]

    # ------------------------------------------------------------------------------------------ queries
    def open_anomalies(self) -> list[Anomaly]:
        """What is in progress now (e.g. to show after a restart, or to close as "unresolved" when a run ends)."""
        out = []
        for key, st in self._states.items():
            det = self._detector(key)
            if det is not None:
                out += [anomaly(det.kind, det.metric, ep) for ep in _episodes(st)]
        out += [anomaly(self._nonfinite.kind, "", ep) for ep in _episodes(self._nf_state)]
        out += [anomaly(self._stall.kind, self._stall.metric, ep) for ep in _episodes(self._stall_state)]
        fc = self._forecast.open_anomaly(self._fc_state)
        out += [fc] if fc else []
        return sorted(out, key=lambda a: (a.start_step, a.kind, a.metric))

    # ------------------------------------------------------------------------------------------ rewind
    def rewind(self, to_step: int) -> list[Event]:
        """Points after `to_step` are superseded (a resume from a checkpoint, a rollback).

        Returns a `superseded` event for every anomaly that began after `to_step` and that this Monitor still
        knows: the open ones and the last `keep_closed` closed ones. A store should treat any anomaly of the run
        with start_step > to_step as superseded, and may keep it visible as history (the spike that made the
        operator roll back is worth keeping). Anomalies that began at or before `to_step` stay as they are,
        open or closed. Steps after `to_step` are then accepted again, and detectors restart their point-to-point
        rules (previous value, smoothing window, streaks) from what survives; levels are kept.
        """
        gone: list[Anomaly] = []
        for key, st in list(self._states.items()):
            det = self._detector(key)
            if det is not None:
                self._states[key], g = det.rewind(st, to_step)
                gone += g
        self._nf_state, g = self._nonfinite.rewind(self._nf_state, to_step)
        gone += g
        self._stall_state, g = self._stall.rewind(self._stall_state, to_step)
        gone += g
        self._fc_state, g = self._forecast.rewind(self._fc_state, to_step)
        gone += g
        keep = []
        for d in self._closed:
            (gone.append(Anomaly.from_dict(d)) if d["start_step"] > to_step else keep.append(d))
        self._closed = keep
        return [Event(SUPERSEDED, a, to_step) for a in sorted(gone, key=lambda a: (a.start_step, a.key))]

    # ------------------------------------------------------------------------------------------ persistence
    def snapshot(self) -> dict:
        """All state as plain JSON-able data (no NaN/Inf): store it anywhere, restore it in a new process.
        It shares the (never mutated) state dicts with the Monitor: serialize it, do not edit it."""
        return {"v": SNAPSHOT_VERSION, "states": dict(self._states), "nonfinite": self._nf_state,
                "stall": self._stall_state, "forecast": self._fc_state, "closed": list(self._closed)}

    def restore(self, snap: Mapping) -> "Monitor":
        """Replace all state with a snapshot's (detectors are re-created from the config on the next step)."""
        if snap.get("v") != SNAPSHOT_VERSION:
            raise ValueError(f"anomaly snapshot version {snap.get('v')!r}, expected {SNAPSHOT_VERSION}")
        self._reset()
        self._states = dict(snap["states"])
        self._nf_state, self._stall_state = snap["nonfinite"], snap["stall"]
        self._fc_state = snap.get("forecast") or self._forecast.init()  # (snapshots from before it: none)
        self._closed = list(snap["closed"])
        self._routes.clear()
        self._detectors.clear()
        return self

    def _detector(self, key: str):
        """The detector of a state key, compiling its route if the series has not been seen since a restore;
        None for a state the config no longer routes to (a snapshot from another configuration)."""
        if key not in self._detectors:
            metric = key.partition(" ")[2]
            # a vector detector's key names the layer's prefix: any member of it routes to the same detector
            for name in (metric, f"{metric}/0"):
                self._compile(name)
                if key in self._detectors:
                    break
        return self._detectors.get(key)


def _episodes(st: dict) -> list[dict]:
    eps = [st["ep"]] if st.get("ep") and not st["ep"].get("silent") else []  # (silent: a shift told elsewhere)
    eps += list((st.get("eps") or {}).values())
    if st.get("hb"):
        eps.append(st["hb"])
    return eps
