"""The trainer's end of the operator command channel: read, validate, deduplicate and acknowledge commands.

A reader thread reads the run's control stream through `observatory.streams.StreamConsumer` (group
`contract.TRAINER_GROUP`: its own unacknowledged entries first, then new ones), rejects malformed commands at
once, answers `accepted` for the rest and queues them; the loop takes them at step boundaries (`poll()`, or
`wait()` while paused), applies them and calls `applied()` / `rejected()`. Ids of applied commands are remembered
in a Redis set (and in checkpoints), so a repeated id is acknowledged but never applied twice. Redis trouble never
reaches the loop: failed writes are logged and dropped.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
import time

from observatory import contract
from observatory.contract import Command, CommandError
from observatory.streams import Backoff, StreamConsumer, connect, text

log = logging.getLogger(__name__)

ACKS_MAXLEN = 10_000  # approximate MAXLEN of the ack stream


class ControlChannel:
    """Background reader of one run's control stream plus the ack/XACK writer used by the loop."""

    def __init__(self, redis_url: str, run_id: str, control_key: bytes | None, consumer: str = "trainer",
                 block_ms: int = 250):
        self.run_id = run_id
        self.control_key = control_key  # only commands signed with it are executed (contract.verify_command)
        self.stream, self.acks = contract.control_stream(run_id), contract.ack_stream(run_id)
        self.applied_key = contract.applied_commands_key(run_id)
        self.consumer = consumer
        self._url = redis_url
        self._block_ms = block_ms
        self._q: queue.Queue[Command] = queue.Queue()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.applied_ids: set[str] = set()
        self.applied_names: dict[str, str] = {}  # id -> command, for the ids applied by this process
        self._pending_ids: set[str] = set()  # accepted and queued, not yet applied or rejected
        self._writer = connect(redis_url, timeout=1.0)
        self._thread = threading.Thread(target=self._run, name=f"control-{run_id}", daemon=True)
        self.started_at = time.time()

    def start(self, applied_ids: set[str]) -> "ControlChannel":
        """Start reading; `applied_ids` are the ids the restored checkpoint remembers."""
        self.applied_ids |= applied_ids
        self.started_at = time.time()
        self._thread.start()
        return self

    def forget_unsaved(self, saved_ids: set[str]) -> list[str]:
        """After a resume: ids in the Redis applied set but not in the checkpoint were applied after it, and their
        effect died with the process. Forget them (resending the same id applies it again) and return them."""
        try:
            lost = sorted({text(m) for m in self._writer.smembers(self.applied_key)} - saved_ids)
            if lost:
                self._writer.srem(self.applied_key, *lost)
            return lost
        except Exception as e:  # Redis is optional for training; the checkpoint's list still guards the ids
            log.warning("control %s: could not reconcile applied command ids: %s", self.run_id, e)
            return []

    def forget(self, ids: list[str]) -> None:
        """A rollback undid these commands: their ids no longer count as applied (resending one applies it)."""
        if not ids:
            return
        with self._lock:
            self.applied_ids.difference_update(ids)
            for i in ids:
                self.applied_names.pop(i, None)
        try:
            self._writer.srem(self.applied_key, *ids)
        except Exception as e:  # the checkpoint's list (without them) still guards a restart
            log.warning("control %s: could not forget undone command ids: %s", self.run_id, e)

    def publish_checkpoints(self, entries: list[dict]) -> None:
        """The checkpoint list operators pick a rollback target from (contract.checkpoints_key)."""
        try:
            self._writer.set(contract.checkpoints_key(self.run_id),
                             json.dumps({"t": time.time(), "checkpoints": entries}))
        except Exception as e:
            log.warning("control %s: could not publish the checkpoint list: %s", self.run_id, e)

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2 + self._block_ms / 1000)
        try:
            self._writer.close()
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
            self.applied_names[cmd.id] = cmd.name
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
                pipe.sadd(self.applied_key, cmd.id)
            pipe.xadd(self.acks, contract.ack_fields(cmd.id, status, detail[:1000], step), maxlen=ACKS_MAXLEN,
                      approximate=True)
            if cmd.entry_id:
                pipe.xack(self.stream, contract.TRAINER_GROUP, cmd.entry_id)
            pipe.execute()
        except Exception as e:  # the loop must not die on Redis; the command stays pending and is retried
            log.warning("control %s: could not ack %s (%s): %s", self.run_id, cmd.id, status, e)

    # ------------------------------------------------------------------------------------------ reader thread
    def _run(self) -> None:
        reader: StreamConsumer | None = None
        backoff = Backoff()
        while not self._stop.is_set():
            try:
                if reader is None:
                    client = connect(self._url, timeout=self._block_ms / 1000 + 2)
                    reader = StreamConsumer(client, self.stream, contract.TRAINER_GROUP, self.consumer)
                for entry_id, fields in reader.read(count=50, block_ms=self._block_ms):
                    self._handle(reader, entry_id, fields)
                backoff.ok()
            except Exception as e:
                if self._stop.is_set():
                    break
                if backoff.first:  # once per outage, not on every retry
                    log.warning("control %s: Redis error (%s); retrying", self.run_id, e)
                _close(reader)
                reader = None
                backoff.wait(self._stop)
        _close(reader)

    def _handle(self, reader: StreamConsumer, entry_id: str, fields: dict) -> None:
        if not fields:  # a pending entry whose body was trimmed away
            reader.ack(entry_id)
            return
        raw_id = text(fields.get(b"id", fields.get("id", "")))
        try:
            contract.verify_command(self.run_id, fields, self.control_key)
        except CommandError as e:
            log.warning("control %s: rejected command %r: %s", self.run_id, raw_id[:80], e)
            self._ack(reader, raw_id, "rejected", str(e), entry_id)
            return
        try:
            cmd = contract.parse_command(fields)
        except CommandError as e:
            self._ack(reader, raw_id, "rejected", str(e), entry_id)
            return
        cmd.entry_id = entry_id
        with self._lock:
            seen = cmd.id in self.applied_ids or cmd.id in self._pending_ids
        if seen or reader.client.sismember(self.applied_key, cmd.id):
            with self._lock:
                queued = cmd.id in self._pending_ids
                if not queued:
                    self.applied_ids.add(cmd.id)
            self._ack(reader, cmd.id, "accepted" if queued else "applied",
                      "duplicate id: " + ("already queued" if queued else "already applied, not applied again"),
                      entry_id)
            return
        if cmd.t and cmd.t < self.started_at - contract.STALE_AFTER_S:
            self._ack(reader, cmd.id, "rejected", f"stale: sent {time.time() - cmd.t:.0f} s ago while no "
                                                  "trainer was listening", entry_id)
            return
        with self._lock:
            self._pending_ids.add(cmd.id)
        try:
            reader.client.xadd(self.acks, contract.ack_fields(
                cmd.id, "accepted", f"queued for the next step boundary (pid {os.getpid()})"),
                maxlen=ACKS_MAXLEN, approximate=True)
        except Exception as e:
            log.warning("control %s: could not send accepted ack: %s", self.run_id, e)
        self._q.put(cmd)

    def _ack(self, reader: StreamConsumer, cmd_id: str, status: str, detail: str, entry_id: str) -> None:
        pipe = reader.client.pipeline(transaction=False)
        pipe.xadd(self.acks, contract.ack_fields(cmd_id, status, detail[:1000]), maxlen=ACKS_MAXLEN,
                  approximate=True)
        pipe.xack(self.stream, contract.TRAINER_GROUP, entry_id)
        pipe.execute()


def _close(reader: StreamConsumer | None) -> None:
    if reader is not None:
        try:
            reader.client.close()
        except Exception:
            pass
