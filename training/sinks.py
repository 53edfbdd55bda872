"""Where the trainer's metrics go: one small interface (after levanter's Tracker) and its implementations.

`log` is called every step; `event` for discrete happenings (LR re-plan, checkpoint saved); `record` for the
other contract kinds (run, state, heartbeat, rewind, manifest) that only mirrors care about. No sink may block
or break training: the W&B sink works on its own thread, and CompositeSink isolates failures.
"""

from __future__ import annotations

import json
import logging
import math
import os
import queue
import threading
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

log = logging.getLogger(__name__)


class Sink:
    def log(self, metrics: Mapping[str, float], step: int) -> None:
        raise NotImplementedError

    def event(self, name: str, step: int, payload: Mapping[str, Any] | None = None) -> None:
        pass

    def record(self, kind: str, data: Mapping[str, Any]) -> None:
        """Any other contract message (kind in observatory.contract.KINDS); most sinks ignore it."""

    def log_summary(self, values: Mapping[str, Any]) -> None:
        pass

    def finish(self) -> None:
        pass

    def last_step(self) -> int | None:
        """The newest step this sink already holds from an earlier process (what a resume supersedes)."""
        return None

    def health(self) -> dict[str, float]:
        """Readings about the sink itself, published with every step (e.g. a publisher's backlog)."""
        return {}


class CompositeSink(Sink):
    """Fans out to several sinks; a sink that raises is reported once in the log and the others carry on."""

    def __init__(self, sinks: Sequence[Sink]):
        self.sinks = list(sinks)
        self.errors: dict[int, int] = {}

    def _each(self, method: str, *args) -> list:
        out = []
        for i, s in enumerate(self.sinks):
            try:
                out.append(getattr(s, method)(*args))
            except Exception as e:
                if i not in self.errors:
                    log.warning("sink %s.%s failed: %r (further errors counted)", type(s).__name__, method, e)
                self.errors[i] = self.errors.get(i, 0) + 1
        return out

    def log(self, metrics, step):
        self._each("log", metrics, step)

    def event(self, name, step, payload=None):
        self._each("event", name, step, payload)

    def record(self, kind, data):
        self._each("record", kind, data)

    def log_summary(self, values):
        self._each("log_summary", values)

    def finish(self):
        self._each("finish")

    def last_step(self):
        return max((s for s in self._each("last_step") if s is not None), default=None)

    def health(self):
        return {k: v for readings in self._each("health") for k, v in readings.items()}


def _num(v: Any) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


class JsonlSink(Sink):
    """One JSON object per line, {"kind", "t", ...}; appends, so a resumed run continues the same file.

    Lines: metrics {step, values}, event {step, name, payload}, summary {values}, and any record(kind, data)
    as {kind, **data}. NaN/Infinity are written as JSON's common extension tokens, like the wire contract.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(self.path, "a", buffering=1, encoding="utf-8")  # line-buffered: survives kill -9
        self._lock = threading.Lock()

    def _write(self, obj: dict) -> None:
        line = json.dumps(obj, separators=(",", ":"), allow_nan=True, default=str)
        with self._lock:
            if not self._f.closed:
                self._f.write(line + "\n")

    def log(self, metrics, step):
        self._write({"kind": "metrics", "t": time.time(), "step": int(step),
                     "values": {k: _num(v) for k, v in metrics.items()}})

    def event(self, name, step, payload=None):
        self._write({"kind": "event", "t": time.time(), "step": int(step), "name": name,
                     "payload": dict(payload or {})})

    def record(self, kind, data):
        self._write({"kind": kind, "t": time.time(), **dict(data)})

    def log_summary(self, values):
        self._write({"kind": "summary", "t": time.time(), "values": dict(values)})

    def finish(self):
        with self._lock:
            self._f.close()


def resolve_wandb_mode(mode: str | None = None) -> str:
    """Offline unless the user asked otherwise: an explicit mode, $WANDB_MODE, or an API key in $WANDB_API_KEY."""
    if mode:
        return mode
    if os.environ.get("WANDB_MODE"):
        return os.environ["WANDB_MODE"]
    return "online" if os.environ.get("WANDB_API_KEY") else "offline"


_STOP = object()
# wandb.init is tried again after a failure, a moment later: a transient one lost the whole mirror.
WANDB_INIT_TRIES = 3
WANDB_INIT_RETRY_S = 0.5


class WandbSink(Sink):
    """Mirrors metrics to W&B from a background thread through a bounded queue; never blocks training.

    wandb is imported and its settings made on the caller's thread (~0.5 s, at start-up): W&B's settings model
    parses its own source as it is built (pydantic's attribute docstrings), and CPython 3.11's AST constructor is
    not safe beside another thread doing the same (SystemError "AST constructor recursion depth mismatch", which
    lost the whole mirror in CI with the import on the sink's thread). wandb.init runs on that thread (it starts a
    service process, ~0.5 s; tried WANDB_INIT_TRIES times, what is logged meanwhile queued). A full queue drops the
    record and counts it; W&B errors are logged once and counted. Steps that go backwards (after a rewind) cannot be
    written to a W&B run and are counted in `stats()["rewound"]`. Events land in the run summary as `events/<name>`
    (W&B has no event track).
    """

    def __init__(self, project: str, run_id: str, config: Mapping[str, Any] | None = None,
                 dir: str | os.PathLike = "var", name: str | None = None, mode: str | None = None,
                 queue_size: int = 10_000):
        self.mode = resolve_wandb_mode(mode)
        self._init_kwargs = dict(project=project, id=run_id, name=name or run_id, config=dict(config or {}),
                                 dir=str(dir), mode=self.mode, resume="allow")
        Path(dir).mkdir(parents=True, exist_ok=True)
        self._q: queue.Queue = queue.Queue(maxsize=queue_size)
        self.dropped = self.errors = self.logged = self.rewound = 0
        self.run = None
        self.run_dir: str | None = None
        self._last_step = -1
        self._settings = self._setup_error = None
        try:
            import wandb
            self._settings = wandb.Settings(console="off", silent=True, x_disable_stats=True, disable_git=True,
                                            save_code=False)
        except Exception as e:  # (reported from the sink's thread, as wandb.init's failures are)
            self._setup_error = e
        self._thread = threading.Thread(target=self._work, name="wandb-sink", daemon=True)
        self._thread.start()

    def _put(self, item) -> None:
        try:
            self._q.put_nowait(item)
        except queue.Full:
            self.dropped += 1

    def log(self, metrics, step):
        self._put(("log", {k: _num(v) for k, v in metrics.items()}, int(step)))

    def event(self, name, step, payload=None):
        self._put(("summary", {f"events/{name}": {"step": int(step), **dict(payload or {})}}))

    def log_summary(self, values):
        self._put(("summary", dict(values)))

    def _error(self, what: str, e: BaseException) -> None:
        if not self.errors:
            log.warning("wandb sink: %s failed: %r (training continues; further errors counted)", what, e)
        self.errors += 1

    def _init(self):
        if self._setup_error is not None:
            raise self._setup_error
        import wandb
        for attempt in range(1, WANDB_INIT_TRIES + 1):
            try:
                return wandb.init(settings=self._settings, **self._init_kwargs)
            except Exception as e:
                if attempt == WANDB_INIT_TRIES:
                    raise
                log.info("wandb sink: wandb.init failed (%r); trying again", e)
                time.sleep(WANDB_INIT_RETRY_S * attempt)

    def _work(self) -> None:
        try:
            self.run = self._init()
            self.run_dir = self.run.dir and str(Path(self.run.dir).parent)
        except BaseException as e:
            self._error("wandb.init", e)
        while True:
            item = self._q.get()
            if item is _STOP:
                break
            if self.run is None:
                self.dropped += 1
                continue
            try:
                if item[0] == "log":
                    _, values, step = item
                    if step < self._last_step:
                        self.rewound += 1
                        continue
                    self.run.log(values, step=step)
                    self._last_step = step
                    self.logged += 1
                else:
                    self.run.summary.update(item[1])
            except Exception as e:
                self._error(item[0], e)
        if self.run is not None:
            try:
                self.run.finish()
            except Exception as e:
                self._error("finish", e)

    def finish(self, timeout_s: float = 60.0) -> None:
        """Flush what is queued and close the run (bounded by timeout_s; a stuck W&B is abandoned)."""
        if not self._thread.is_alive():
            return
        try:
            self._q.put(_STOP, timeout=timeout_s)
        except queue.Full:
            self.dropped += 1
            return
        self._thread.join(timeout_s)

    def stats(self) -> dict[str, int]:
        return {"logged": self.logged, "dropped": self.dropped, "errors": self.errors, "rewound": self.rewound,
                "queued": self._q.qsize()}
