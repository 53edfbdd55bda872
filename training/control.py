"""The trainer's end of the operator command channel: read, validate, deduplicate and acknowledge commands.

A reader thread reads the run's control stream through `observatory.streams.StreamConsumer` (group
`contract.TRAINER_GROUP`: its own unacknowledged entries first, then new ones), rejects malformed commands at
once, answers `accepted` for the rest and queues them; the loop takes them at step boundaries (`poll()`, or
`wait()` while paused), applies them and calls `applied()` / `rejected()`. Every id answered is remembered with its
outcome (run_state.seen_record) here, in a Redis hash and in checkpoints: a repeat of a queued or applied id is
acknowledged but never applied twice; a replay of a rejected or undone id is refused, as is a command issued
outside contract.check_fresh's window. Within that window, the nonce of every command accepted is remembered too,
here, in a Redis key of its own with a TTL (contract.seen_nonce_key) and in checkpoints (the seen records carry it):
a copy of an entry is refused by its nonce even when the id memory lost it (the hash deleted, and the trainer
restored from a checkpoint older than the command). Redis trouble never reaches the loop: failed writes are logged
and dropped.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time

from observatory import contract
from observatory.contract import Command, CommandError
from observatory.streams import Backoff, StreamConsumer, connect, text
from training.run_state import merge_seen, prune_seen, seen_record

log = logging.getLogger(__name__)

ACKS_MAXLEN = 10_000  # approximate MAXLEN of the ack stream


class ControlChannel:
    """Background reader of one run's control stream plus the ack/XACK writer used by the loop."""

    def __init__(self, redis_url: str, run_id: str, control_key: bytes | None, consumer: str = "trainer",
                 block_ms: int = 250):
        self.run_id = run_id
        self.control_key = control_key  # only commands signed with it are executed (contract.verify_command)
        self.stream, self.acks = contract.control_stream(run_id), contract.ack_stream(run_id)
        self.seen_key = contract.seen_commands_key(run_id)
        self.consumer = consumer
        self._url = redis_url
        self._block_ms = block_ms
        self._q: queue.Queue[Command] = queue.Queue()
        self._stop = threading.Event()
        self._caught_up = threading.Event()  # set once a read found nothing more: every waiting command is queued
        self._lock = threading.Lock()
        self.seen: dict[str, dict] = {}  # id -> seen_record, for every id answered (pruned: run_state.prune_seen)
        self.nonces: dict[str, tuple[float, str]] = {}  # nonce -> (issue time, control entry) accepted lately
        self._pending_ids: set[str] = set()  # accepted and queued, not yet applied or rejected
        self._writer = connect(redis_url, timeout=1.0)
        self._thread = threading.Thread(target=self._run, name=f"control-{run_id}", daemon=True)

    def start(self, known: dict[str, dict], resumed_step: int | None) -> tuple[dict[str, dict], list[str]]:
        """Start reading, remembering `known` (the restored checkpoint's memory) and what Redis holds. After a resume,
        ids Redis holds as applied but the checkpoint does not were applied after it and their effect died with the
        process: they count as undone. Returns (the merged memory, those ids)."""
        stored = self._load()
        lost = sorted(i for i, r in stored.items() if r["outcome"] == "applied" and i not in known) \
            if resumed_step is not None else []
        for i in lost:
            stored[i] = {**stored[i], "outcome": "undone", "by": "restart", "step": resumed_step}
        now = time.time()
        merged = prune_seen(merge_seen(known, stored), now)
        with self._lock:
            self.seen = dict(merged)
            self.nonces = {r["nonce"]: (float(r["t"]), "") for r in merged.values()
                           if r.get("nonce") and now - float(r.get("t") or 0) <= contract.NONCE_MEMORY_S}
        self._store(merged, replace=True)
        self._thread.start()
        return merged, lost

    def remember(self, records: dict[str, dict]) -> None:
        """Outcomes decided by the loop itself (a rollback's undone ids)."""
        with self._lock:
            self.seen.update(records)
        self._store(records)

    def _load(self) -> dict[str, dict]:
        try:
            raw = self._writer.hgetall(self.seen_key)
            return {text(k): json.loads(v) for k, v in raw.items()}
        except Exception as e:  # Redis is optional for training; the checkpoint's memory still guards the ids
            log.warning("control %s: could not read the command ids seen: %s", self.run_id, e)
            return {}

    def _store(self, records: dict[str, dict], replace: bool = False) -> None:
        try:
            pipe = self._writer.pipeline(transaction=False)
            if replace:
                pipe.delete(self.seen_key)
            if records:
                pipe.hset(self.seen_key, mapping={i: json.dumps(r) for i, r in records.items()})
            pipe.execute()
        except Exception as e:  # the checkpoint's memory still guards a restart
            log.warning("control %s: could not store the command ids seen: %s", self.run_id, e)

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
    def caught_up(self, timeout: float) -> bool:
        """Until the reader has queued every command already in the stream (its first read that found nothing
        more), so that a command sent while the trainer was down is applied at the first step boundary, not after
        however many steps the reader thread took to start. False after `timeout` (Redis unreachable)."""
        return self._caught_up.wait(timeout)

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
        self._finish(cmd, seen_record(cmd, "applied"), "applied", detail, step)

    def rejected(self, cmd: Command, detail: str, step: int | None = None) -> None:
        self._finish(cmd, seen_record(cmd, "rejected", detail), "rejected", detail, step)

    def repeated(self, cmd: Command, rec: dict, step: int | None = None) -> None:
        """A command whose id the loop's state already answered: acked by that outcome, nothing remembered anew."""
        status, detail = answer_repeat(cmd.id, rec)
        self._finish(cmd, None, status, detail, step)

    def _finish(self, cmd: Command, rec: dict | None, status: str, detail: str, step) -> None:
        pruned: set[str] = set()
        with self._lock:
            self._pending_ids.discard(cmd.id)
            if rec is not None:
                self.seen[cmd.id] = rec
                pruned = set(self.seen) - set(prune_seen(self.seen, time.time()))
                for i in pruned:
                    del self.seen[i]
        try:
            pipe = self._writer.pipeline(transaction=False)
            if rec is not None:
                pipe.hset(self.seen_key, cmd.id, json.dumps(rec))
            if pruned:
                pipe.hdel(self.seen_key, *pruned)
            pipe.xadd(self.acks, contract.ack_fields(cmd.id, status, detail[:1000], step, entry=cmd.entry_id),
                      maxlen=ACKS_MAXLEN, approximate=True)
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
                entries = reader.read(count=50, block_ms=self._block_ms)
                for entry_id, fields in entries:
                    self._handle(reader, entry_id, fields)
                if not entries:
                    self._caught_up.set()
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
            queued = cmd.id in self._pending_ids
            rec = self.seen.get(cmd.id)
        if queued or rec is not None:
            status, detail = ("accepted", "duplicate id: already queued") if queued else answer_repeat(cmd.id, rec)
            self._ack(reader, cmd.id, status, detail, entry_id)
            return
        try:
            contract.check_fresh(cmd.t, time.time())
        except CommandError as e:  # the loop records the refusal (a replay of it is then refused by id)
            cmd.refused = str(e)
        if not cmd.refused and self._nonce_seen(reader, cmd, text(entry_id)):  # a copy the id memory lost
            self._ack(reader, cmd.id, "rejected", f"replayed: nonce of a command already received (id {cmd.id}); "
                      "send it again with a new id", entry_id)
            return
        with self._lock:
            self._pending_ids.add(cmd.id)
        if not cmd.refused:
            try:
                reader.client.xadd(self.acks, contract.ack_fields(
                    cmd.id, "accepted", "queued for the next step boundary", entry=entry_id),
                    maxlen=ACKS_MAXLEN, approximate=True)
            except Exception as e:
                log.warning("control %s: could not send accepted ack: %s", self.run_id, e)
        self._q.put(cmd)

    def _nonce_seen(self, reader: StreamConsumer, cmd: Command, entry_id: str) -> bool:
        """Whether this command's nonce came before on another control entry (here, or in Redis's memory of it): a
        copy. The same entry read again (this consumer's pending entries after a reconnect or a restart) is not.
        If new, the nonce is remembered now, before the command is queued; a Redis error propagates (the reader
        retries the entry)."""
        now = time.time()
        with self._lock:
            prev = self.nonces.get(cmd.nonce)
            for n, (t, _) in list(self.nonces.items()):
                if now - t > contract.NONCE_MEMORY_S:
                    del self.nonces[n]
        if prev is not None:
            return prev[1] != entry_id
        key = contract.seen_nonce_key(self.run_id, cmd.nonce)
        if not reader.client.set(key, entry_id, nx=True, ex=contract.NONCE_MEMORY_S) and \
                text(reader.client.get(key) or b"") != entry_id:
            return True
        with self._lock:
            self.nonces[cmd.nonce] = (cmd.t, entry_id)
        return False

    def _ack(self, reader: StreamConsumer, cmd_id: str, status: str, detail: str, entry_id: str) -> None:
        pipe = reader.client.pipeline(transaction=False)
        pipe.xadd(self.acks, contract.ack_fields(cmd_id, status, detail[:1000], entry=entry_id), maxlen=ACKS_MAXLEN,
                  approximate=True)
        pipe.xack(self.stream, contract.TRAINER_GROUP, entry_id)
        pipe.execute()


def answer_repeat(cmd_id: str, rec: dict) -> tuple[str, str]:
    """The ack (status, detail) for an id already answered with `rec`: a duplicate, or a refused replay."""
    if rec["outcome"] == "applied":
        return "applied", "duplicate id: already applied, not applied again"
    if rec["outcome"] == "rejected":
        return "rejected", f"replayed: id {cmd_id} was already rejected: {rec.get('detail', '')}"
    by = rec.get("by", "")
    how = (f"a restart from the checkpoint at step {rec.get('step')}" if by == "restart" else f"rollback {by}")
    return "rejected", f"id {cmd_id} was undone by {how}; send it again with a new id"


def _close(reader: StreamConsumer | None) -> None:
    if reader is not None:
        try:
            reader.client.close()
        except Exception:
            pass
