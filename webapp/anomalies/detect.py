"""The detectors inside ingest: each committed batch's points go through the run's Monitor, the anomalies it finds
are stored, and a frame is pushed to the run's dashboards; a timer checks stalls and lost heartbeats. Exactly
once across restarts, order in a batch, forecasts: docs/ANOMALIES.md "The detectors inside ingest".
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import time
from collections import OrderedDict
from dataclasses import dataclass

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from observatory import contract
from observatory.anomalies import Monitor
from observatory.downsample import unclassify
from webapp.anomalies import store
from webapp.anomalies.models import DetectorState
from webapp.metrics.changes import RunChanges
from webapp.metrics.models import Point
from webapp.runs import forecast as forecast_lib
from webapp.runs.models import Run, RunEvent

log = logging.getLogger("observatory.anomalies")
CACHE_RUNS = 256  # Monitors kept in memory (one per run being written); others reload from their snapshot
SAVE_EVERY_S = 5.0  # a calm run's snapshot is saved this often (the timer flushes idle ones)...
SAVE_EVERY_STEPS = 500  # ...or after this many steps
MAX_REPLAY_STEPS = 2_000  # a run with no snapshot yet (the app deployed mid-run) starts from this far back


class _Conflict(Exception):
    """Another process saved the run's state since this Monitor was loaded."""


@dataclass
class Entry:
    version: int | None  # the DetectorState version this Monitor continues (None: no row yet)
    mon: Monitor
    last: int | None  # the newest step fed
    saved_at: float  # time.monotonic() of the last save (or load)
    unsaved: int = 0  # steps fed since


class Detection:
    """One per ingest process: `committed` is a metrics.changes hook, `tick` a timer."""

    def __init__(self):
        self.cache: OrderedDict[str, Entry] = OrderedDict()
        self.stats = {"batches": 0, "steps": 0, "events": 0, "saves": 0, "replayed": 0, "seconds": 0.0}

    # ------------------------------------------------------------------------------------------ batches
    def committed(self, changes: dict[str, RunChanges]) -> list[tuple[str, dict]]:
        t0 = time.perf_counter()
        frames = []
        for run_id, ch in changes.items():
            if ch.points or ch.rewinds or _forecast_events(ch):
                frame = self._batch(run_id, ch)
                if frame:
                    frames.append((run_id, frame))
        self.stats["batches"] += 1
        self.stats["seconds"] += time.perf_counter() - t0
        return frames

    def _batch(self, run_id: str, ch: RunChanges) -> dict | None:
        by_step: dict[int, dict[str, float]] = {}
        for name, pts in ch.points.items():
            for step, (value, special) in pts.items():
                row = by_step.get(step)
                if row is None:
                    row = by_step[step] = {}
                row[name] = value if special == 0 else unclassify(value, special)
        steps = sorted(by_step)
        rewinds = [rw["to_step"] for rw in ch.rewinds]
        now = time.time()  # a step's own time when the batch carries it; else when ingest stored it
        forecasts = [r for r in (_registration(run_id, i) for i in _forecast_events(ch)) if r is not None]

        def feed(mon: Monitor) -> list:
            for record in forecasts:
                _set_forecast(mon, run_id, record)
            events = []
            for to_step in rewinds:
                events += mon.rewind(to_step)
            for step in steps:
                events += mon.observe(step, by_step[step], ch.times.get(step, now))
            return events

        self.stats["steps"] += len(steps)
        return self._run(run_id, feed, first=steps[0] if steps else None, newest=steps[-1] if steps else None,
                         rewinds=rewinds, n_steps=len(steps))

    # ------------------------------------------------------------------------------------------ timer
    def tick(self, now: float) -> list[tuple[str, dict]]:
        """Stalls and lost heartbeats of the runs that are training (Run.heartbeat, the heartbeat key's TTL); then
        the snapshots of runs that went quiet are saved."""
        since = timezone.now() - dt.timedelta(seconds=settings.OBS_ANOMALY_WATCH_S)
        runs = list(Run.objects.watched().filter(updated_at__gte=since, last_heartbeat_at__isnull=False)
                    .only("id", "state", "phase", "heartbeat"))
        frames = []
        if runs:
            from webapp.redis import get_redis

            pipe = get_redis().pipeline(transaction=False)
            for run in runs:
                pipe.pttl(contract.heartbeat_key(run.id))
            for run, pttl in zip(runs, pipe.execute()):
                frame = self._tick_run(run, pttl, now)
                if frame:
                    frames.append((run.id, frame))
        self.flush()
        return frames

    def _tick_run(self, run: Run, pttl: int, now: float) -> dict | None:
        # pttl: ms left on the heartbeat key; -2 gone, -1 no TTL. Its age needs no clock of the trainer's.
        age = 0.0 if pttl == -1 else contract.HEARTBEAT_TTL_S - pttl / 1000 if pttl >= 0 else math.inf
        since_step = run.heartbeat.get("since_step_s")
        since_step = since_step + age if isinstance(since_step, (int, float)) and age < math.inf else None
        phase = run.phase or run.heartbeat.get("phase") or None
        return self._run(run.id, lambda mon: mon.tick(now, since_step_s=since_step, heartbeat_age_s=age,
                                                     phase=phase), timer=True)

    def flush(self, force: bool = False) -> None:
        """Save the snapshots that have waited SAVE_EVERY_S (all with `force`)."""
        due = time.monotonic() - SAVE_EVERY_S
        for run_id, entry in list(self.cache.items()):
            if entry.unsaved and (force or entry.saved_at <= due):
                try:
                    with transaction.atomic():
                        self._save(run_id, entry)
                except _Conflict:
                    self.cache.pop(run_id, None)  # someone else continued the run: theirs is newer

    # ------------------------------------------------------------------------------------------ state
    def _run(self, run_id: str, feed, first: int | None = None, newest: int | None = None, rewinds=(),
             n_steps: int = 0, timer: bool = False) -> dict | None:
        """feed(monitor) -> events, on the run's current Monitor; store what it found. Returns the live frame."""
        for attempt in range(2):
            version, last = _row(run_id)
            entry = self.cache.get(run_id)
            if timer and version is None and entry is None:
                return None  # nothing seen yet: no stall to find (and its first batch will replay what is stored)
            events = []
            try:
                if entry is None or entry.version != version:
                    entry, events = self._load(run_id, version, last, first)
                events += feed(entry.mon)
                if rewinds:
                    entry.last = min([*rewinds, *([entry.last] if entry.last is not None else [])])
                if newest is not None:
                    entry.last = newest if entry.last is None else max(entry.last, newest)
                entry.unsaved += n_steps
                self.stats["events"] += len(events)
                due = bool(events or rewinds) or (not timer and (
                    entry.version is None or entry.unsaved >= SAVE_EVERY_STEPS
                    or time.monotonic() - entry.saved_at >= SAVE_EVERY_S))
                if not due:
                    self._keep(run_id, entry)
                    return None
                changed = store.Changed(run_id)
                with transaction.atomic():
                    self._save(run_id, entry)
                    for to_step in rewinds:
                        store.supersede_after(run_id, to_step, changed)
                    store.apply_events(run_id, events, changed)
                    store.route_escalations(changed)
            except _Conflict:
                self.cache.pop(run_id, None)
                if attempt:
                    raise RuntimeError(f"run {run_id}: detector state keeps changing under this process") from None
                continue
            except Exception:
                self.cache.pop(run_id, None)  # it may hold steps whose effects rolled back: reload next time
                raise
            self._keep(run_id, entry)
            return changed.frame()
        return None

    def _keep(self, run_id: str, entry: Entry) -> None:
        self.cache[run_id] = entry
        self.cache.move_to_end(run_id)
        while len(self.cache) > CACHE_RUNS:
            old_id, old = self.cache.popitem(last=False)
            if old.unsaved:  # its steps would otherwise be replayed from the database on its next batch
                try:
                    with transaction.atomic():
                        self._save(old_id, old)
                except _Conflict:
                    pass

    def _load(self, run_id: str, version: int | None, last: int | None, first: int | None) -> tuple[Entry, list]:
        """The run's Monitor from its snapshot, then fed the stored points it has not seen that come before
        `first` (the batch at hand). Returns it and the events that replay raised (normally none)."""
        mon = Monitor()
        if version is not None:
            snap = DetectorState.objects.filter(run_id=run_id).values_list("snapshot", flat=True).first()
            try:
                mon.restore(snap or {})
            except (ValueError, KeyError, TypeError) as e:  # a snapshot of an older detector version
                log.warning("run %s: detector state not usable (%s); starting afresh", run_id, e)
                mon, last = Monitor(), None
        if mon.forecast_sha is None:  # a forecast published in an earlier batch, or before the snapshot
            reg = forecast_lib.latest(run_id)
            if reg is not None and reg.verified:
                _set_forecast(mon, run_id, reg.record)
        entry = Entry(version, mon, last, time.monotonic())
        top = first if first is not None else (Run.objects.filter(pk=run_id).values_list("last_step", flat=True)
                                               .first())
        if top is None or (last is None and first is None):
            return entry, []
        lo = top - MAX_REPLAY_STEPS - 1 if last is None else max(last, top - MAX_REPLAY_STEPS - 1)
        rows = Point.objects.filter(series__run_id=run_id, step__gt=lo).order_by("step")
        rows = rows.filter(step__lt=first) if first is not None else rows.filter(step__lte=top)
        events, cur, values = [], None, {}
        for name, step, value, special in rows.values_list("series__name", "step", "value", "special").iterator(
                chunk_size=5000):
            if step != cur:
                if values:
                    events += mon.observe(cur, values)  # (no time: a replayed step is not a step interval)
                    entry.unsaved += 1
                cur, values = step, {}
            values[name] = value if special == 0 else unclassify(value, special)
        if values:
            events += mon.observe(cur, values)
            entry.unsaved += 1
            entry.last = cur
        self.stats["replayed"] += entry.unsaved
        return entry, events

    def _save(self, run_id: str, entry: Entry) -> None:
        """Write the snapshot if the row is still at entry.version (inside a transaction); raises _Conflict."""
        now = timezone.now()
        if entry.version is None:
            try:
                with transaction.atomic():
                    DetectorState.objects.create(run_id=run_id, snapshot=entry.mon.snapshot(),
                                                 last_step=entry.last, version=1, updated_at=now)
            except IntegrityError:
                raise _Conflict from None
            entry.version = 1
        else:
            n = DetectorState.objects.filter(run_id=run_id, version=entry.version).update(
                snapshot=entry.mon.snapshot(), last_step=entry.last, version=entry.version + 1, updated_at=now)
            if not n:
                raise _Conflict
            entry.version += 1
        entry.saved_at, entry.unsaved = time.monotonic(), 0
        self.stats["saves"] += 1


def _forecast_events(ch: RunChanges) -> list[int]:
    return [e["id"] for e in ch.events if e.get("kind") == RunEvent.KIND_EVENT
            and e.get("name") == forecast_lib.EVENT_NAME]


def _registration(run_id: str, event_id: int) -> dict | None:
    """The verified record of a forecast event (read unredacted from the database), else None."""
    ev = RunEvent.objects.filter(pk=event_id, run_id=run_id).first()
    reg = forecast_lib.of_event(ev) if ev is not None else None
    if reg is not None and not reg.verified:
        log.warning("run %s: forecast event %s not used: %s", run_id, event_id, reg.problem)
    return reg.record if reg is not None and reg.verified else None


def _set_forecast(mon: Monitor, run_id: str, record: dict) -> None:
    try:
        mon.set_forecast(mon.forecast_band(record))
    except ValueError as e:
        log.warning("run %s: forecast not usable by the detector: %s", run_id, e)


def _row(run_id: str) -> tuple[int | None, int | None]:
    """(version, last step) of the run's state row; (None, None) when it has none yet."""
    row = DetectorState.objects.filter(run_id=run_id).values_list("version", "last_step").first()
    return row if row is not None else (None, None)


DETECTION = Detection()
