"""The ingest loop: run telemetry streams (Redis, consumer group) -> database -> RunChanges for whoever listens.

Delivery is at-least-once and writes are idempotent, so nothing is lost or doubled across restarts:
  * entries are XACKed only after the transaction holding their effects committed;
  * on start (and whenever a read fails) the consumer first re-reads its own pending entries (id 0), and every
    RECLAIM_EVERY_S it XAUTOCLAIMs entries another (dead) consumer left pending for over RECLAIM_IDLE_MS;
  * points are upserts on (series, step); events are keyed by their stream entry id.
Malformed entries go to contract.DEADLETTER_STREAM with a reason, are counted in DEADLETTER_COUNT_KEY, and ACKed.
"""

from __future__ import annotations

import logging
import sys
import time
from collections import Counter
from typing import Callable

import redis
from django.db import DatabaseError, InterfaceError, OperationalError, ProgrammingError, connection, transaction

from observatory import contract
from observatory.streams import ensure_group, is_nogroup, read_group, text
from webapp.metrics.apply import apply_messages
from webapp.metrics.changes import RunChanges

log = logging.getLogger("observatory.ingest")

DISCOVER_EVERY_S = 1.0
RECLAIM_EVERY_S = 30.0
RECLAIM_IDLE_MS = 60_000
DEADLETTER_MAXLEN = 100_000
LOG_EVERY_S = 10.0
# Database trouble that is not the entry's fault: nothing is ACKed, the batch is retried after a back-off.
_RETRY = (OperationalError, InterfaceError, ProgrammingError)


class Ingestor:
    """Reads every run's telemetry stream with one multi-stream XREADGROUP, applies batches, acknowledges them,
    and hands what each committed batch changed ({run id: RunChanges}) to `on_changes`."""

    def __init__(self, client: redis.Redis, on_changes: Callable[[dict[str, RunChanges]], None] | None = None,
                 consumer: str = "ingest-1", batch: int = 500):
        self.r = client
        self.on_changes = on_changes
        self.consumer = consumer
        self.batch = batch
        self.streams: dict[str, str] = {}  # telemetry stream -> run id, for streams with our group
        self.pending: set[str] = set()  # streams whose own pending entries must be re-read first
        self.bad_run_ids: set[str] = set()
        self.next_discover = 0.0
        self.next_reclaim = time.monotonic() + RECLAIM_EVERY_S
        self.stats: Counter = Counter()
        self._logged = dict(self.stats)
        self.next_log = time.monotonic() + LOG_EVERY_S

    # ------------------------------------------------------------------------------------------ streams
    def discover(self) -> None:
        for raw in self.r.smembers(contract.RUNS_KEY):
            run_id = text(raw)
            stream = contract.telemetry_stream(run_id)
            if stream in self.streams:
                continue
            if not contract.RUN_ID_RE.match(run_id):
                if run_id not in self.bad_run_ids:
                    log.warning("ignoring run id %r in %s: not a valid run id", run_id[:80], contract.RUNS_KEY)
                    self.bad_run_ids.add(run_id)
                continue
            ensure_group(self.r, stream, contract.INGEST_GROUP)
            self.streams[stream] = run_id
            self.pending.add(stream)
            log.info("watching run %s (%s)", run_id, stream)

    def reclaim(self) -> None:
        """Take over entries that another consumer read but never acknowledged (it died)."""
        for stream in list(self.streams):
            start = "0-0"
            while True:
                # (not justid: redis-py then drops the cursor from the reply)
                reply = self.r.xautoclaim(stream, contract.INGEST_GROUP, self.consumer, RECLAIM_IDLE_MS,
                                          start_id=start, count=self.batch)
                start, claimed = text(reply[0]), reply[1]
                if claimed:
                    self.stats["reclaimed"] += len(claimed)
                    self.pending.add(stream)
                if start == "0-0":
                    break

    def _forget_groups(self) -> None:
        """A stream or group vanished (deleted, FLUSHDB): re-create on the next discovery."""
        self.streams.clear()
        self.pending.clear()
        self.next_discover = 0.0

    def read(self, block_ms: int) -> list[tuple[str, list]]:
        try:
            if self.pending:
                reply = read_group(self.r, contract.INGEST_GROUP, self.consumer, {s: "0" for s in self.pending},
                                   self.batch)
                got = [(s, entries) for s, entries in reply if entries]
                self.pending -= {s for s, entries in reply if not entries}
                self.pending -= {s for s in list(self.pending) if s not in dict(reply)}
                if got:
                    return got
            if not self.streams:
                if block_ms:
                    time.sleep(block_ms / 1000)
                return []
            return read_group(self.r, contract.INGEST_GROUP, self.consumer, {s: ">" for s in self.streams},
                              self.batch, block_ms or None)
        except redis.ResponseError as e:
            if is_nogroup(e):
                self._forget_groups()
                return []
            raise

    # ------------------------------------------------------------------------------------------ processing
    def process(self, batch: list[tuple[str, list]]) -> int:
        """Validate, write, dead-letter, then ACK one batch. Raises on database trouble (nothing ACKed)."""
        good: list[tuple[str, str, contract.Message]] = []
        bad: list[tuple[str, str, str, dict]] = []
        acks: dict[str, list[str]] = {}
        for stream, entries in batch:
            run_id = self.streams.get(stream)
            for entry_id, fields in entries:
                acks.setdefault(stream, []).append(entry_id)
                if not fields:  # trimmed or deleted while pending: nothing left to apply
                    self.stats["vanished"] += 1
                    continue
                try:
                    good.append((stream, entry_id, contract.decode(fields, expect_run=run_id)))
                except contract.ContractError as e:
                    bad.append((stream, entry_id, e.reason, fields))
                except Exception as e:  # a validator bug must not kill ingest either
                    bad.append((stream, entry_id, "internal", fields))
                    log.exception("decode crashed on %s %s: %s", stream, entry_id, e)
        bad.extend(self._write(good))
        if bad:
            pipe = self.r.pipeline(transaction=False)
            for stream, entry_id, reason, fields in bad:
                pipe.xadd(contract.DEADLETTER_STREAM, contract.deadletter_fields(stream, entry_id, reason, fields),
                          maxlen=DEADLETTER_MAXLEN, approximate=True)
                pipe.hincrby(contract.DEADLETTER_COUNT_KEY, reason, 1)
                log.warning("dead-lettered %s %s: %s", stream, entry_id, reason)
            pipe.execute()
        if acks:
            pipe = self.r.pipeline(transaction=False)
            for stream, ids in acks.items():
                pipe.xack(stream, contract.INGEST_GROUP, *ids)
            pipe.execute()
        n = sum(len(ids) for ids in acks.values())
        self.stats["entries"] += n
        self.stats["deadlettered"] += len(bad)
        return n

    def _write(self, good) -> list[tuple[str, str, str, dict]]:
        """Apply messages in one transaction. If that fails for a reason other than the database being
        unreachable or unmigrated, apply them one by one and return the ones that still fail, for the dead-letter
        stream: one poisonous entry must neither block its stream nor take the batch down with it."""
        if not good:
            return []
        try:
            self._apply(good)
            return []
        except _RETRY:
            raise
        except Exception as e:
            log.warning("batch of %d failed (%s: %s); retrying entry by entry", len(good), type(e).__name__, e)
        rejected = []
        for item in good:
            try:
                self._apply([item])
            except _RETRY:
                raise
            except Exception as e:
                stream, entry_id, msg = item
                reason = "db_rejected" if isinstance(e, DatabaseError) else "internal"
                log.exception("entry %s %s rejected: %s", stream, entry_id, e)
                rejected.append((stream, entry_id, reason, {"v": msg.v, "kind": msg.kind, "run": msg.run,
                                                            "error": f"{type(e).__name__}: {e}"[:500]}))
        return rejected

    def _apply(self, items) -> None:
        with transaction.atomic():
            changes = apply_messages((entry_id, msg) for _, entry_id, msg in items)
        self.stats["messages"] += len(items)
        self.stats["points"] += sum(len(m.data["values"]) for _, _, m in items if m.kind == "metrics")
        if self.on_changes is not None:
            self.on_changes(changes)

    # ------------------------------------------------------------------------------------------ loop
    def step(self, block_ms: int) -> int:
        """One iteration: discover, maybe reclaim, read (blocking up to block_ms), process. Returns entries
        handled. The caller shortens block_ms when it has something of its own due (a live push)."""
        now = time.monotonic()
        if now >= self.next_discover:
            self.discover()
            self.next_discover = now + DISCOVER_EVERY_S
        if now >= self.next_reclaim:
            self.reclaim()
            self.next_reclaim = now + RECLAIM_EVERY_S
        block_ms = min(block_ms, int(max(0.0, self.next_discover - time.monotonic()) * 1000) + 1)
        n = 0
        batch = self.read(block_ms)
        if batch:
            try:
                n = self.process(batch)
            except Exception:
                self.pending |= {s for s, _ in batch}  # re-read from our pending list, not lost
                if isinstance(sys.exc_info()[1], DatabaseError):
                    connection.close()  # a fresh connection next time
                raise
        self._maybe_log()
        return n

    def _maybe_log(self) -> None:
        now = time.monotonic()
        if now < self.next_log:
            return
        self.next_log = now + LOG_EVERY_S
        if dict(self.stats) != self._logged:  # stats: entries, points, dead-lettered, and what callers add (pushes)
            d = {k: v - self._logged.get(k, 0) for k, v in self.stats.items()}
            log.info("last %.0fs: %s; watching %d runs", LOG_EVERY_S,
                     ", ".join(f"{v} {k}" for k, v in sorted(d.items())), len(self.streams))
            self._logged = dict(self.stats)

    def drain(self, max_rounds: int = 10_000) -> int:
        """Process everything available now (own pending, then new), without blocking. For --once and tests."""
        self.discover()
        total = 0
        for _ in range(max_rounds):
            batch = self.read(0)
            if not batch:
                break
            total += self.process(batch)
        return total
