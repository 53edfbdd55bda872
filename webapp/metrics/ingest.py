"""The ingest loop: run telemetry streams (Redis, consumer group) -> database -> RunChanges for whoever listens.
Leases, fencing, replays and dead letters: docs/ARCHITECTURE.md "The ingest loop in detail" and "Ingest: replicas,
leases, fencing, durability".
"""

from __future__ import annotations

import logging
import random
import sys
import threading
import time
import uuid
from collections import Counter
from typing import Callable

import redis
from django.db import DatabaseError, InterfaceError, OperationalError, ProgrammingError, connection, transaction

from observatory import contract
from observatory.streams import ensure_group, is_nogroup, text
from webapp.metrics import fence
from webapp.metrics.apply import apply_messages
from webapp.metrics.changes import RunChanges
from webapp.metrics.leases import Leases

log = logging.getLogger("observatory.ingest")

LEASE_MS = 10_000
STUCK_S = 60.0  # a loop that has not finished a step for this long stops renewing its leases
DISCOVER_EVERY_S = 1.0
SCAN_EVERY_S = 10.0
DEADLETTER_MAXLEN = 100_000
LOG_EVERY_S = 10.0
STREAM_PATTERN = contract.telemetry_stream("*")
_HEAD, _TAIL = STREAM_PATTERN.split("*")
# Database trouble that is not the entry's fault: nothing is ACKed, the batch is retried after a back-off.
_RETRY = (OperationalError, InterfaceError, ProgrammingError)


def run_of(stream: str) -> str | None:
    """The run id a telemetry stream's name holds, or None when it holds no valid one."""
    run_id = stream[len(_HEAD):-len(_TAIL)] if stream.startswith(_HEAD) and stream.endswith(_TAIL) else ""
    return run_id if contract.RUN_ID_RE.match(run_id) else None


class Ingestor:
    """Reads the streams it holds leases on with one scripted XREADGROUP, applies batches, acknowledges them, and
    hands what each committed batch changed ({run id: RunChanges}) to `on_changes`. Call close() when done."""

    def __init__(self, client: redis.Redis, on_changes: Callable[[dict[str, RunChanges]], None] | None = None,
                 consumer: str = "ingest-1", batch: int = 500, lease_ms: int = LEASE_MS):
        self.r = client
        self.on_changes = on_changes
        self.consumer = consumer
        self.batch = batch
        self.lease_ms = lease_ms
        self.leases = Leases(client, f"{consumer}:{uuid.uuid4().hex[:12]}", lease_ms)
        self.streams: dict[str, str | None] = {}  # stream we hold -> its run id (None: not a valid run id)
        self.epochs: dict[str, int] = {}  # run id -> our fence epoch
        # held streams whose own pending entries must be read first -> read them after this id ("0": all); a
        # stream leaves when that read comes back empty, and new entries (">") are read from then on
        self.pending: dict[str, str] = {}
        self.defer_acks = False  # True: process() leaves acknowledging to ack() (live pushes go first)
        # callable([contract.Message]) or None: a batch's valid messages, in stream order, before they are written
        # (live appends their points to the run's live log at once: a viewer's delay does not wait on SQL)
        self.on_decoded: Callable[[list], None] | None = None
        self.unacked: dict[str, list[str]] = {}  # stream -> entry ids applied, awaiting ack()
        self.last_batch: dict[str, set[str]] = {}  # stream -> ids process() applied since the caller took them
        self.last_ids: dict[str, str] = {}  # held stream -> last entry id when found empty (blocking wait)
        self.scanned: set[str] = set()
        self.bad_run_ids: set[str] = set()
        self.live = 1
        self.next_discover = self.next_scan = self.next_renew = 0.0
        self._lost: set[str] = set()  # leases the renewal thread found gone, for the loop to forget
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self._progress = time.monotonic()
        self.stats: Counter = Counter()
        self._logged = dict(self.stats)
        self.next_log = time.monotonic() + LOG_EVERY_S

    # ------------------------------------------------------------------------------------------ streams
    def discover(self) -> None:
        """Find the streams, then hold a fair share of them: give back surplus, take free ones."""
        found = set()
        for raw in self.r.smembers(contract.RUNS_KEY):
            run_id = text(raw)
            if contract.RUN_ID_RE.match(run_id):
                found.add(contract.telemetry_stream(run_id))
            elif run_id not in self.bad_run_ids:
                log.warning("ignoring run id %r in %s: not a valid run id", run_id[:80], contract.RUNS_KEY)
                self.bad_run_ids.add(run_id)
        if time.monotonic() >= self.next_scan:  # streams of runs that never announced themselves
            self.scanned = {text(k) for k in self.r.scan_iter(match=STREAM_PATTERN, count=1000, _type="STREAM")}
            self.next_scan = time.monotonic() + SCAN_EVERY_S
        found |= self.scanned
        target = -(-len(found) // self.live)
        surplus = len(self.streams) - target
        if surplus > 0 and self.live > 1:
            give = sorted(self.streams, key=lambda s: s in self.pending)[:surplus]
            for s in give:
                self._forget(s, "handed over")
            self.leases.release(give)
        free = list(found - self.streams.keys())
        random.shuffle(free)  # consumers starting together do not all race for the same streams
        for stream in free:
            if len(self.streams) >= target:
                break
            if self.leases.acquire(stream):
                try:
                    self._take(stream)
                except BaseException:
                    self.leases.release([stream])
                    raise

    def _take(self, stream: str) -> None:
        run_id = run_of(stream)
        if run_id is not None:
            self.epochs[run_id] = fence.bump(run_id)
        ensure_group(self.r, stream, contract.INGEST_GROUP)
        start, claimed = "0-0", 0
        while True:  # (not justid: redis-py then drops the cursor from the reply)
            reply = self.r.xautoclaim(stream, contract.INGEST_GROUP, self.consumer, 0, start_id=start,
                                      count=self.batch)
            start, claimed = text(reply[0]), claimed + len(reply[1])
            if start == "0-0":
                break
        self.streams[stream] = run_id
        self.pending[stream] = "0"
        self.stats["reclaimed"] += claimed
        log.info("reading %s%s", stream, f" ({claimed} pending entries taken over)" if claimed else "")

    def _forget(self, stream: str, why: str) -> None:
        self.unacked.pop(stream, None)  # not ours to acknowledge any more: the next owner replays them
        run_id = self.streams.pop(stream, None)
        self.pending.pop(stream, None)
        self.last_ids.pop(stream, None)
        if run_id is not None:
            self.epochs.pop(run_id, None)
        log.info("no longer reading %s: %s", stream, why)

    def renew(self) -> None:
        """Extend our leases (forgetting the ones we lost) and say we are alive."""
        self._renew_once()
        self._forget_lost()
        self.next_renew = time.monotonic() + self.lease_ms / 3000

    def _renew_once(self) -> None:
        lost = self.leases.renew(list(self.streams))
        self.live = self.leases.announce()
        with self._lock:
            self._lost |= lost

    def _forget_lost(self) -> None:
        with self._lock:
            lost, self._lost = self._lost, set()
        for stream in lost & self.streams.keys():
            self._forget(stream, "lease lost")

    def _renew_forever(self) -> None:
        """The renewal thread: keeps the leases while the loop makes progress, however long one batch takes."""
        while not self._stop.wait(self.lease_ms / 3000):
            if time.monotonic() - self._progress > STUCK_S:
                continue  # stuck (a hung database?): let the leases expire, so that others take the streams
            try:
                self._renew_once()
            except redis.RedisError as e:  # the loop meets the same trouble and backs off; keep trying
                log.debug("lease renewal failed: %s", e)

    def close(self) -> None:
        """Hand every stream back now (others need not wait for the leases to expire)."""
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join(timeout=5)
        try:
            self.leases.release(list(self.streams))
            self.leases.leave()
        except redis.RedisError as e:
            log.warning("could not release ingest leases (%s); they expire by themselves", e)
        for stream in list(self.streams):
            self._forget(stream, "closing")

    def read(self) -> list[tuple[str, list]]:
        """One batch from the streams we hold: their own pending entries first, then new ones."""
        if not self.streams:
            return []
        ids = {s: self.pending.get(s, ">") for s in self.streams}
        got = []
        for stream, status, payload, read_new in self.leases.read(contract.INGEST_GROUP, self.consumer, ids,
                                                                  max(16, -(-self.batch // len(ids)))):
            if status == "ok":
                got.append((stream, payload))
                if read_new:
                    self.pending.pop(stream, None)
                else:  # the next pending read starts after these (their acks may be deferred)
                    self.pending[stream] = payload[-1][0]
            elif status == "empty":
                self.pending.pop(stream, None)
                self.last_ids[stream] = payload
            elif status == "lost":
                self._forget(stream, "lease lost")
            elif is_nogroup(redis.ResponseError(payload)):  # the stream vanished: read it again from its start
                ensure_group(self.r, stream, contract.INGEST_GROUP)
                self.pending[stream] = "0"
            else:
                raise redis.ResponseError(payload)
        return got

    def _wait(self, block_ms: int) -> None:
        """Block until a stream we hold has a new entry, or block_ms passed (XREAD, no group state touched)."""
        if not self.streams:
            time.sleep(block_ms / 1000)
            return
        self.r.xread({s: self.last_ids.get(s, "$") for s in self.streams}, count=1, block=block_ms)

    # ------------------------------------------------------------------------------------------ processing
    def process(self, batch: list[tuple[str, list]]) -> int:
        """Validate, write, dead-letter, then ACK one batch. Raises on database trouble (nothing ACKed).
        Entries of a stream whose lease passed to another consumer meanwhile are left to that consumer."""
        good: list[tuple[str, str, contract.Message]] = []
        bad: list[tuple[str, str, str, str]] = []  # (stream, entry id, reason, error)
        raw: dict[tuple[str, str], dict] = {}  # (stream, entry id) -> fields, for dead letters
        acks: dict[str, list[str]] = {}
        for stream, entries in batch:
            run_id = self.streams.get(stream) or run_of(stream) or stream[len(_HEAD):-len(_TAIL)]
            for entry_id, fields in entries:
                acks.setdefault(stream, []).append(entry_id)
                if not fields:  # trimmed or deleted while pending: nothing left to apply
                    self.stats["vanished"] += 1
                    continue
                raw[stream, entry_id] = fields
                try:
                    good.append((stream, entry_id, contract.decode(fields, expect_run=run_id)))
                except contract.ContractError as e:
                    bad.append((stream, entry_id, e.reason, str(e)))
                except Exception as e:  # a validator bug must not kill ingest either
                    bad.append((stream, entry_id, "internal", f"{type(e).__name__}: {e}"))
                    log.exception("decode crashed on %s %s: %s", stream, entry_id, e)
        if self.on_decoded is not None and good:
            self.on_decoded([m for s, _, m in good if s in self.streams])
        bad.extend(self._write(good))
        bad = [b for b in bad if b[0] in self.streams]
        acks = {s: ids for s, ids in acks.items() if s in self.streams}
        if bad:
            pipe = self.r.pipeline(transaction=False)
            for stream, entry_id, reason, error in bad:
                pipe.xadd(contract.DEADLETTER_STREAM,
                          contract.deadletter_fields(stream, entry_id, reason, raw[stream, entry_id], error),
                          maxlen=DEADLETTER_MAXLEN, approximate=True)
                pipe.hincrby(contract.DEADLETTER_COUNT_KEY, reason, 1)
                log.warning("dead-lettered %s %s: %s", stream, entry_id, reason)
            pipe.execute()
        if self.defer_acks:
            for stream, ids in acks.items():
                self.unacked.setdefault(stream, []).extend(ids)
                self.last_batch.setdefault(stream, set()).update(ids)  # (the caller takes and clears it)
        else:
            self._xack(acks)
        n = sum(len(ids) for ids in acks.values())
        self.stats["entries"] += n
        self.stats["deadlettered"] += len(bad)
        return n

    def ack(self, except_runs: set[str] = frozenset(), keep: dict[str, set[str]] | None = None) -> None:
        """Acknowledge the entries process() applied (with defer_acks), but those of `except_runs` and the ids in
        `keep` ({stream: ids}: entries whose changes are still to be pushed)."""
        acks, left = {}, {}
        for s, ids in self.unacked.items():
            if self.streams.get(s) in except_runs:
                left[s] = ids
                continue
            held = (keep or {}).get(s, ())
            acks[s] = [i for i in ids if i not in held]
            left[s] = [i for i in ids if i in held]
        acks = {s: ids for s, ids in acks.items() if ids}
        if acks:
            self._xack(acks)
        self.unacked = {s: ids for s, ids in left.items() if ids}

    def _xack(self, acks: dict[str, list[str]]) -> None:
        pipe = self.r.pipeline(transaction=False)
        for stream, ids in acks.items():
            pipe.xack(stream, contract.INGEST_GROUP, *ids)
            if self.streams[stream] is None:  # no run will ever read these: dead-lettered, now gone
                pipe.xdel(stream, *ids)
        pipe.execute()

    def _write(self, good) -> list[tuple[str, str, str, str]]:
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
                stream, entry_id, _ = item
                reason = "db_rejected" if isinstance(e, DatabaseError) else "internal"
                log.exception("entry %s %s rejected: %s", stream, entry_id, e)
                rejected.append((stream, entry_id, reason, f"{type(e).__name__}: {e}"))
        return rejected

    def _apply(self, items) -> None:
        while items:
            try:
                with transaction.atomic():
                    changes = apply_messages(((entry_id, msg) for _, entry_id, msg in items),
                                             epochs={m.run: self.epochs.get(m.run, -1) for _, _, m in items})
            except fence.Fenced as e:  # another consumer holds these runs now: theirs to apply, not ours
                self.stats["fenced"] += 1
                for stream in {s for s, _, m in items if m.run in e.run_ids}:
                    self._forget(stream, "fenced: another consumer took it over")
                items = [i for i in items if i[2].run not in e.run_ids]
                continue
            self.stats["messages"] += len(items)
            self.stats["points"] += sum(len(m.data["values"]) for _, _, m in items if m.kind == "metrics")
            if self.on_changes is not None:
                self.on_changes(changes)
            return

    # ------------------------------------------------------------------------------------------ loop
    def step(self, block_ms: int) -> int:
        """One iteration: renew and discover when due, read (waiting up to block_ms for something new), process.
        Returns entries handled. The caller shortens block_ms when it has something of its own due (a push)."""
        now = self._progress = time.monotonic()
        if self._renewer is None:  # a long-running loop: renew from a thread from now on
            self.renew()
            self._renewer = threading.Thread(target=self._renew_forever, name="ingest-leases", daemon=True)
            self._renewer.start()
        self._forget_lost()
        if now >= self.next_discover:
            self.discover()
            self.next_discover = now + DISCOVER_EVERY_S
        batch = self.read()
        if not batch and block_ms > 0:
            due = self.next_discover - time.monotonic()
            self._wait(max(1, min(block_ms, int(due * 1000) + 1)))
            batch = self.read()
        n = 0
        if batch:
            try:
                n = self.process(batch)
            except Exception:
                # re-read from our pending list, from its start
                self.pending.update({s: "0" for s, _ in batch if s in self.streams})
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
            log.info("last %.0fs: %s; reading %d streams of %d consumers", LOG_EVERY_S,
                     ", ".join(f"{v} {k}" for k, v in sorted(d.items())), len(self.streams), self.live)
            self._logged = dict(self.stats)

    def drain(self, max_rounds: int = 10_000) -> int:
        """Process everything available now (own pending, then new), without blocking. For --once and tests."""
        self.renew()
        self.discover()
        total = 0
        for _ in range(max_rounds):
            batch = self.read()
            if not batch:
                break
            total += self.process(batch)
        return total
