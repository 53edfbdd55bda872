"""The trainer's end of the operator command channel: read, validate, deduplicate and acknowledge commands.

A reader thread XREADGROUPs the run's control stream (group `contract.TRAINER_GROUP`), rejects malformed commands
at once, answers `accepted` for the rest and queues them; the training loop takes them at step boundaries
(`poll()`, or `wait()` while paused), applies them and calls `applied()` / `rejected()`. Ids of applied commands
are remembered in a Redis set (and in checkpoints), so a repeated id is acknowledged but never applied twice.
Redis trouble never reaches the loop: failed writes are logged and dropped.
"""

from __future__ import annotations

import json
import logging
import math
import os
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import redis as redis_lib

from observatory import contract

log = logging.getLogger(__name__)

STALE_AFTER_S = 600  # a command older than this when first seen was sent while no trainer listened: rejected
MAX_FAULT_STEPS = 1000


def applied_key(run_id: str) -> str:
    """SET of command ids this run has applied."""
    return contract.applied_commands_key(run_id)


class CommandError(ValueError):
    """A command that cannot be applied; the message is the reason sent back in the `rejected` ack."""


@dataclass
class Command:
    id: str
    name: str
    args: dict
    reason: str = ""
    user: str = ""
    t: float = 0.0
    entry_id: str = ""
    extra: dict = field(default_factory=dict)


def _int(args: dict, key: str, lo: int, hi: int | None = None, default: int | None = None) -> int:
    if key not in args:
        if default is None:
            raise CommandError(f"missing argument {key!r}")
        return default
    v = args[key]
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int) or v < lo or (hi is not None and v > hi):
        raise CommandError(f"{key} must be an integer >= {lo}" + (f" and <= {hi}" if hi is not None else "")
                           + f", got {v!r}")
    return v


def _num(args: dict, key: str, lo: float, hi: float, default: float | None = None) -> float:
    if key not in args:
        if default is None:
            raise CommandError(f"missing argument {key!r}")
        return default
    v = args[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not lo <= v <= hi:
        raise CommandError(f"{key} must be a number in [{lo:g}, {hi:g}], got {v!r}")
    return float(v)


_ALLOWED_ARGS = {"pause": set(), "resume": set(), "stop": set(), "checkpoint": set(),
                 "rollback": {"step", "skip_batches"}, "set-lr-multiplier": {"value"},
                 "set-token-budget": {"tokens"}, "set-mixture": {"weights"},
                 "inject-fault": {"fault", "steps", "factor", "seconds"}}


def validate_args(name: str, args: Any) -> dict:
    """Structural validation (types and ranges); checks needing the trainer's state happen when applied."""
    if name not in contract.COMMANDS:
        raise CommandError(f"unknown command {name!r} (known: {', '.join(contract.COMMANDS)})")
    if not isinstance(args, dict):
        raise CommandError("args must be a JSON object")
    extra = set(args) - _ALLOWED_ARGS[name]
    if extra:
        allowed = ", ".join(sorted(_ALLOWED_ARGS[name])) or "none"
        raise CommandError(f"unexpected argument(s) {', '.join(sorted(extra))} for {name} (allowed: {allowed})")
    if name == "rollback":
        return {"step": _int(args, "step", 0), "skip_batches": _int(args, "skip_batches", 0, default=0)}
    if name == "set-lr-multiplier":
        return {"value": _num(args, "value", 0.0, 1000.0)}
    if name == "set-token-budget":
        return {"tokens": _int(args, "tokens", 1)}
    if name == "set-mixture":
        w = args.get("weights")
        if not isinstance(w, dict) or not w:
            raise CommandError("weights must be a non-empty object of domain -> weight")
        for k, v in w.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise CommandError(f"weight of {k!r} must be a number >= 0, got {v!r}")
        if sum(w.values()) <= 0:
            raise CommandError("at least one weight must be > 0")
        return {"weights": {str(k): float(v) for k, v in w.items()}}
    if name == "inject-fault":
        fault = args.get("fault")
        if fault not in contract.FAULTS:
            raise CommandError(f"fault must be one of {', '.join(contract.FAULTS)}, got {fault!r}")
        out = {"fault": fault, "steps": _int(args, "steps", 1, MAX_FAULT_STEPS, default=5)}
        if fault == "lr-spike":
            out["factor"] = _num(args, "factor", 1.0, 1e4, default=100.0)
        if fault == "stall":
            out["seconds"] = _num(args, "seconds", 0.0, 600.0, default=10.0)
        return out
    return {}


def parse(fields: dict) -> Command:
    """A control-stream entry (bytes or str) to a validated Command; CommandError says what is wrong."""
    f = {(k.decode() if isinstance(k, bytes) else k): (v.decode("utf-8", "replace") if isinstance(v, bytes) else v)
         for k, v in fields.items()}
    cmd_id = f.get("id", "")
    if not cmd_id or len(cmd_id) > 200:
        raise CommandError("missing or oversized command id")
    if f.get("v") not in contract.SUPPORTED_VERSIONS:
        raise CommandError(f"unsupported schema version {f.get('v')!r}")
    try:
        args = json.loads(f.get("args") or "{}")
    except ValueError as e:
        raise CommandError(f"args is not JSON: {str(e)[:100]}") from None
    try:
        t = float(f.get("t") or 0)
    except ValueError:
        t = 0.0
    name = f.get("command", "")
    return Command(id=cmd_id, name=name, args=validate_args(name, args), reason=f.get("reason", ""),
                   user=f.get("user", ""), t=t)


class ControlChannel:
    """Background reader of one run's control stream plus the ack/XACK writer used by the loop."""

    def __init__(self, redis_url: str, run_id: str, consumer: str = "trainer", block_ms: int = 250,
                 applied_ids: set | None = None):
        self.run_id = run_id
        self.stream, self.acks = contract.control_stream(run_id), contract.ack_stream(run_id)
        self.consumer = consumer
        self._block_ms = block_ms
        self._url = redis_url
        self._q: queue.Queue = queue.Queue()
        self._stop = threading.Event()
        self.applied_ids: set[str] = set(applied_ids or ())
        self._pending_ids: set[str] = set()  # accepted and queued, not yet applied or rejected
        self._lock = threading.Lock()
        self._writer = self._client(timeout=1.0)
        self._thread = threading.Thread(target=self._run, name=f"control-{run_id}", daemon=True)
        self.started_at = time.time()

    def _client(self, timeout: float):
        return redis_lib.Redis.from_url(self._url, socket_timeout=timeout, socket_connect_timeout=1.0)

    def start(self) -> "ControlChannel":
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2 + self._block_ms / 1000)
        for c in (self._writer,):
            try:
                c.close()
            except Exception:
                pass

    # ------------------------------------------------------------------------------------------ loop side
    def poll(self) -> list[Command]:
        """Commands ready to apply (non-blocking)."""
        out = []
        while True:
            try:
                out.append(self._q.get_nowait())
            except queue.Empty:
                return out

    def wait(self, timeout: float) -> list[Command]:
        """Block up to `timeout` for a command (used while paused)."""
        try:
            first = self._q.get(timeout=timeout)
        except queue.Empty:
            return []
        return [first] + self.poll()

    def applied(self, cmd: Command, detail: str = "", step: int | None = None) -> None:
        with self._lock:
            self.applied_ids.add(cmd.id)
            self._pending_ids.discard(cmd.id)
        self._finish(cmd, "applied", detail, step, remember=True)

    def rejected(self, cmd: Command, detail: str, step: int | None = None) -> None:
        with self._lock:
            self._pending_ids.discard(cmd.id)
        self._finish(cmd, "rejected", detail, step, remember=False)

    def _finish(self, cmd: Command, status: str, detail: str, step, remember: bool) -> None:
        try:
            pipe = self._writer.pipeline(transaction=False)
            if remember:
                pipe.sadd(applied_key(self.run_id), cmd.id)
            pipe.xadd(self.acks, contract.ack_fields(cmd.id, status, detail[:1000], step),
                      maxlen=10_000, approximate=True)
            if cmd.entry_id:
                pipe.xack(self.stream, contract.TRAINER_GROUP, cmd.entry_id)
            pipe.execute()
        except Exception as e:  # the loop must not die on Redis; the command stays pending and is retried
            log.warning("control %s: could not ack %s (%s): %s", self.run_id, cmd.id, status, e)

    # ------------------------------------------------------------------------------------------ reader thread
    def _run(self) -> None:
        client = None
        backlog_done = False
        backoff = 0.1
        while not self._stop.is_set():
            try:
                if client is None:
                    client = self._client(timeout=self._block_ms / 1000 + 2)
                    try:
                        client.xgroup_create(self.stream, contract.TRAINER_GROUP, id="0", mkstream=True)
                    except redis_lib.ResponseError as e:
                        if "BUSYGROUP" not in str(e):
                            raise
                    backlog_done = False
                # First our own pending entries (delivered before a crash, never XACKed), then new ones.
                start = "0" if not backlog_done else ">"
                resp = client.xreadgroup(contract.TRAINER_GROUP, self.consumer, {self.stream: start},
                                         count=50, block=None if start == "0" else self._block_ms)
                entries = _entries(resp)
                if start == "0" and not entries:
                    backlog_done = True
                for entry_id, fields in entries:
                    self._handle(client, entry_id, fields)
                backoff = 0.1
            except Exception as e:
                if self._stop.is_set():
                    break
                if backoff == 0.1:  # once per outage, not on every retry
                    log.warning("control %s: Redis error (%s); retrying", self.run_id, e)
                try:
                    if client is not None:
                        client.close()
                except Exception:
                    pass
                client = None
                self._stop.wait(backoff)
                backoff = min(2.0, backoff * 2)
        if client is not None:
            try:
                client.close()
            except Exception:
                pass

    def _handle(self, client, entry_id: str, fields: dict) -> None:
        if not fields:  # a pending entry whose body was trimmed away
            client.xack(self.stream, contract.TRAINER_GROUP, entry_id)
            return
        raw_id = fields.get(b"id", fields.get("id", b""))
        raw_id = raw_id.decode("utf-8", "replace") if isinstance(raw_id, bytes) else str(raw_id)
        try:
            cmd = parse(fields)
        except CommandError as e:
            self._ack(client, raw_id, "rejected", str(e), entry_id)
            return
        cmd.entry_id = entry_id
        with self._lock:
            seen = cmd.id in self.applied_ids or cmd.id in self._pending_ids
        if seen or client.sismember(applied_key(self.run_id), cmd.id):
            if not seen:
                with self._lock:
                    self.applied_ids.add(cmd.id)
            queued = cmd.id in self._pending_ids
            self._ack(client, cmd.id, "accepted" if queued else "applied",
                      "duplicate id: " + ("already queued" if queued else "already applied, not applied again"),
                      entry_id)
            return
        if cmd.t and cmd.t < self.started_at - STALE_AFTER_S:
            self._ack(client, cmd.id, "rejected", f"stale: sent {time.time() - cmd.t:.0f} s ago while no "
                                                  "trainer was listening", entry_id)
            return
        with self._lock:
            self._pending_ids.add(cmd.id)
        try:
            client.xadd(self.acks, contract.ack_fields(cmd.id, "accepted", f"queued for the next step boundary "
                                                                         f"(pid {os.getpid()})"),
                        maxlen=10_000, approximate=True)
        except Exception as e:
            log.warning("control %s: could not send accepted ack: %s", self.run_id, e)
        self._q.put(cmd)

    def _ack(self, client, cmd_id: str, status: str, detail: str, entry_id: str) -> None:
        pipe = client.pipeline(transaction=False)
        pipe.xadd(self.acks, contract.ack_fields(cmd_id, status, detail[:1000]), maxlen=10_000, approximate=True)
        pipe.xack(self.stream, contract.TRAINER_GROUP, entry_id)
        pipe.execute()


def _entries(resp) -> list:
    """XREADGROUP reply (RESP2 list or RESP3 dict) to [(entry_id str, fields dict)]."""
    if not resp:
        return []
    items = resp.items() if isinstance(resp, dict) else resp
    out = []
    for _stream, entries in items:
        for entry_id, fields in entries:
            eid = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
            out.append((eid, fields or {}))
    return out
