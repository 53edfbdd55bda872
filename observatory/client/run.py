"""One run as a training loop sees it: `log`, `event`, `finish`, a heartbeat thread, and the run's lifecycle.

The loop's thread only converts values and appends to the publisher's queue; encoding and I/O happen on the
publisher's thread, heartbeats on their own. Every message is a `observatory.contract` message, so the site
shows a client run exactly like a trainer run.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import math
import os
import threading
import time
import traceback
from typing import Any, Mapping

from observatory import contract
from observatory.streams.queued import QueuedPublisher

log = logging.getLogger(__name__)


def jsonable(obj: Any, depth: int = 0) -> Any:
    """A config or payload as plain JSON values: mappings, dataclasses and namespaces become objects, tuples and
    sets lists, numpy-like scalars numbers, anything else its str()."""
    if depth > contract.MAX_DEPTH - 2:
        return str(obj)
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        obj = dataclasses.asdict(obj)
    elif not isinstance(obj, Mapping) and hasattr(obj, "__dict__") and type(obj).__name__ == "Namespace":
        obj = vars(obj)  # argparse.Namespace
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v, depth + 1) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [jsonable(v, depth + 1) for v in obj]
    if hasattr(obj, "item") and getattr(obj, "ndim", 0) == 0:  # numpy / torch / jax scalars
        try:
            return jsonable(obj.item(), depth + 1)
        except (TypeError, ValueError):
            pass
    return str(obj)


def number(value: Any) -> float | None:
    """A loggable value as a float (NaN and ±Inf kept), or None for what is not a number (text, media, arrays)."""
    if isinstance(value, (str, bytes)):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


class Run:
    """A run being published. Made by `observatory.client.init`; usable as a context manager."""

    def __init__(self, publisher: QueuedPublisher, name: str, config: Mapping[str, Any] | None = None, *,
                 heartbeat_s: float = 2.0, mode: str = "redis", dashboard_url: str | None = None):
        self.publisher = publisher
        self.id = publisher.run_id
        self.name = name
        self.config: dict = jsonable(dict(config or {}))
        self.mode = mode
        self.dashboard_url = dashboard_url
        self.started_at = time.time()
        self._next_step = 0  # the step a log() without one gets
        self._step = 0  # the latest step logged (heartbeats report it)
        self._step_wall = time.time()
        self._tokens: int | None = None
        self._phase = "training"
        self._skipped = 0
        self._warned: set[str] = set()
        self._finished = False
        self._last_beat: tuple[float, int] | None = None
        self._rate = 0.0
        self._stop = threading.Event()
        self._publish_info()
        publisher.publish("state", {"state": "training", "step": 0, "detail": ""})
        self._heartbeat_s = heartbeat_s
        self._hb_thread = threading.Thread(target=self._beat_loop, name=f"heartbeat-{self.id}", daemon=True)
        self._hb_thread.start()

    # ------------------------------------------------------------------------------------------ the loop's API
    def log(self, values: Mapping[str, Any], step: int | None = None) -> int:
        """Publish one step's values (converted to float; NaN/Inf kept). Values that are not numbers, or whose
        name the contract refuses, are skipped and counted in `stats()["skipped"]`. Returns the step used."""
        if step is None:
            step = self._next_step
        elif isinstance(step, bool) or not 0 <= int(step) <= contract.MAX_STEP:
            raise ValueError(f"step must be an integer in [0, 2**62], got {step!r}")
        step = int(step)
        out = {}
        for name, value in values.items():
            v = number(value)
            if v is None or not isinstance(name, str) or not contract.METRIC_NAME_RE.match(name):
                self._skip(name, value)
                continue
            out[name] = v
        tokens = out.get(contract.M_TOTAL_TOKENS)
        if tokens is not None and math.isfinite(tokens):
            self._tokens = int(tokens)
        if len(out) <= contract.MAX_METRICS_PER_RECORD:
            if out:
                self.publisher.metrics(step, out)
        else:  # more names than one record may hold: several records of the same step
            pairs = list(out.items())
            for i in range(0, len(pairs), contract.MAX_METRICS_PER_RECORD):
                self.publisher.metrics(step, dict(pairs[i:i + contract.MAX_METRICS_PER_RECORD]))
        if step != self._step:
            self._step, self._step_wall = step, time.time()
        self._next_step = step + 1
        return step

    def event(self, name: str, payload: Mapping[str, Any] | None = None, step: int | None = None) -> None:
        """Publish a named event (shown on the run's timeline) at `step` (default: the latest step logged)."""
        data = {"t": time.time(), "step": self._step if step is None else int(step), "name": name,
                "payload": jsonable(dict(payload or {}))}
        contract.encode(self.id, "event", data)  # a bad name or payload fails here, in the caller's thread
        self.publisher.publish("event", data)

    def update_config(self, changes: Mapping[str, Any]) -> None:
        """Merge into the run's config and publish it again (the site shows the latest)."""
        self.config.update(jsonable(dict(changes)))
        self._publish_info()

    def finish(self, failed: bool = False, detail: str = "", timeout: float = 10.0) -> bool:
        """End the run: state `stopped` (or `failed`), a last heartbeat, then deliver what is queued (up to
        `timeout` seconds). True when everything was delivered. Calling it again does nothing."""
        if self._finished:
            return True
        self._finished = True
        self._stop.set()
        self._hb_thread.join(timeout=self._heartbeat_s + 1)
        self._phase = "failed" if failed else "stopped"
        self.publisher.publish("state", {"state": self._phase, "step": self._step, "detail": str(detail)[:3000]})
        self._beat()  # the final phase reaches the heartbeat key at once
        return self.publisher.close(timeout)

    def stats(self) -> dict:
        """The publisher's counters (published, dropped, invalid, ..., queue_depth) and `skipped` values."""
        return {**self.publisher.stats(), "skipped": self._skipped}

    @property
    def step(self) -> int:
        """The latest step logged."""
        return self._step

    def __enter__(self) -> "Run":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        detail = ""
        if exc_type is not None:
            lines = traceback.format_exception(exc_type, exc, tb)
            detail = f"{exc_type.__name__}: {exc}\n" + "".join(lines[-12:])[-2500:]
        self.finish(failed=exc_type is not None, detail=detail)
        return False

    def __repr__(self) -> str:
        return f"<observatory Run {self.id} ({self.mode}) step={self._step}>"

    # ------------------------------------------------------------------------------------------ internals
    def _publish_info(self) -> None:
        # a copy: the message waits in the queue while the config may change
        self.publisher.publish("run", {"name": self.name, "config": copy.deepcopy(self.config),
                                       "started_at": self.started_at, "run_id": self.id, "pid": os.getpid()})

    def _skip(self, name: Any, value: Any) -> None:
        self._skipped += 1
        key = str(name)
        if key not in self._warned and len(self._warned) < 100:
            self._warned.add(key)
            why = "not a metric name" if not isinstance(name, str) or not contract.METRIC_NAME_RE.match(name) \
                else f"a {type(value).__name__}, not a number"
            log.warning("observatory run %s: skipping %r (%s)", self.id, key[:80], why)

    def _beat(self) -> None:
        now, step = time.time(), self._step
        if self._last_beat is not None and now > self._last_beat[0]:  # steps_per_s: the rate between beats
            self._rate = max(0.0, (step - self._last_beat[1]) / (now - self._last_beat[0]))
        self._last_beat = (now, step)
        self.publisher.publish("heartbeat", {
            "t": now, "phase": self._phase, "step": step, "tokens": self._tokens, "token_budget": None,
            "eta_s": None, "steps_per_s": self._rate, "since_step_s": now - self._step_wall, "pid": os.getpid()})

    def _beat_loop(self) -> None:
        while True:
            try:
                self._beat()
            except Exception:  # a heartbeat must never take the loop down
                log.exception("observatory run %s: heartbeat failed", self.id)
            if self._stop.wait(self._heartbeat_s):
                return
