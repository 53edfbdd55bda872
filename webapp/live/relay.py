"""The push tier's relay (`manage.py relay`): the ONLY thing that posts to nchan. It reads each run's live log
(webapp.live.livelog: every frame a viewer may see, in order, numbered, appended by ingest after its commit and by
the other producers) and publishes each entry as one message on the run's full channel and on its lite channel;
under a crowd (webapp.live.lite: nchan's count of lite subscribers at or above OBS_LIVE_PACE_VIEWERS) the lite channel
at most once per OBS_LIVE_PACE_MS, one message carrying every entry since the last; the frames carry their entry's
number ("seq"), so a viewer checks for holes and drops repeats whichever relay sent them. A held lite batch goes out
at its deadline (the read blocks no longer than that), before a gap frame, and before close() hands the run back.

Relays scale out and fail over: any number run, sharing the runs through a lease per run
(`obs:live:relay:lease:<run>`, SET NX PX with a token unique per process, TTL LEASE_MS; each relay holds at most its
share, ceil(active runs / live relays), announced in RELAYS_KEY). The leases and the announcement are renewed every
LEASE_MS / 3 by a thread of their own (start()), so a publish that nginx holds up longer than the lease costs the
relay nothing. Fencing: a relay publishes only while its lease is sure to be alive (not found lost by the renewer,
and renewed less than LEASE_MS ago by the relay's own clock, counted from before the renewal was sent). The cursor
per run (webapp.live.lite.Cursor: the last number published on each channel, nchan's last message id on each after
it, and the last number of a lite message being published) is written after each publish, and before each lite one,
only while the lease is the writer's (one script: a relay that lost its lease cannot move it), so a relay killed
with -9 is replaced within LEASE_MS + a discovery round, and its successor resumes each channel after its own
position: no hole; and what the dead relay published but could not record is recognised by nchan's last message id
on that channel (a full entry, or the whole lite message named in the cursor) and not sent again: no duplicate. A
cursor older than the log's window (a relay down longer than it keeps) is followed by a "gap" frame (the page
refetches the window over HTTP). Runs idle for IDLE_S leave the read set; a run with no cursor (new, or appeared
while no relay ran) is read from the start of its log.
"""
from __future__ import annotations

import logging
import math
import threading
import time
import uuid
from collections import Counter

import redis
from django.conf import settings

from observatory import contract
from observatory.streams import streams_reply, text
from observatory.streams.nchan import NchanPublisher
from webapp.live import livelog, protocol
from webapp.live.lite import LITE_NAMES, LITE_PREFIXES, POLL_S, Cursor, LitePacing, lite_frames
from webapp.metrics.leases import _RENEW

log = logging.getLogger("observatory.relay")

DISCOVER_EVERY_S = 0.5
LEASE_MS = 3000  # a dead relay's runs are taken over within this and one discovery round
IDLE_S = 600.0  # a run with no append for this long leaves the read set (its cursor stays for when it returns)
CURSOR_TTL_S = 7 * 86_400
SINCE = "0:0"  # a first subscription's last_event_id: nchan's oldest kept (a made-up "<time>:0" logged misses)
LEASE_PREFIX = f"{contract.PREFIX}:live:relay:lease:"
RELAYS_KEY = f"{contract.PREFIX}:live:relays"  # ZSET relay token -> its announcement's expiry (ms)

STATS_KEY = f"{contract.PREFIX}:relay:stats"  # HASH per relay: STATS_KEY:<token>, refreshed for /metrics
STATS_EVERY_S = 2.0
STATS_TTL_S = 60


cursor_key = livelog.relay_cursor_key  # webapp.live.lite.Cursor: each channel's last entry published, nchan's ids


def _id_key(message_id: str) -> tuple[int, int]:
    """nchan's message id "<time>:<tag>" (one channel's) as a comparable pair."""
    t, _, tag = message_id.partition(":")
    return int(t), int(tag.strip("[]").split(",")[0] or 0)


def _id_after(a: str, b: str) -> bool:
    try:
        return _id_key(a) > _id_key(b)
    except ValueError:
        return True


def _after_second_of(message_id: str) -> None:
    """Wait until the clock is past the second of nchan's message id: a message published now gets a later id."""
    try:
        wait = _id_key(message_id)[0] + 1 - time.time()
    except ValueError:
        return
    if 0 < wait <= 1.0:
        time.sleep(wait)


def lease_key(run_id: str) -> str:
    return LEASE_PREFIX + run_id


def add_page_data(request, run, page: dict) -> None:
    """Page-data contributor: `live_push` ({"path": where to subscribe, "since": a first subscription's last_event_id:
    nchan's oldest kept message, its whole resume window; a made-up "<time>:0" names no message, and nchan logged the
    first as missed}) when there is a push tier; the page then subscribes there instead of the hub."""
    if settings.OBS_LIVE_PUSH_URL:
        page["live_push"] = {"path": settings.OBS_LIVE_SUBSCRIBE_PATH, "since": SINCE,
                             "lite": {"names": sorted(LITE_NAMES), "prefixes": list(LITE_PREFIXES)}}


# KEYS: lease, cursor; ARGV: token, cursor value, ttl -> 1 written, 0 the lease is not ours
_SAVE = """
if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('set', KEYS[2], ARGV[2], 'EX', ARGV[3])
return 1
"""


class Relay(LitePacing):
    """Publishes the live logs of the runs it holds. Call step() in a loop; close() hands its runs back."""

    def __init__(self, client: redis.Redis, publisher: NchanPublisher, batch: int = 500, lease_ms: int = LEASE_MS,
                 token: str | None = None):
        self.r, self.pub, self.batch, self.lease_ms = client, publisher, batch, lease_ms
        self.token = token or uuid.uuid4().hex
        self.cursors: dict[str, str] = {}  # run id -> last log entry id read (the runs held)
        self.pos: dict[str, Cursor] = {}  # run id -> its cursor as last recorded
        self.held: dict[str, list[tuple[int, list[dict]]]] = {}  # run id -> entries read, not yet on lite
        self.due: dict[str, float] = {}  # run id -> when (monotonic) the lite channel may have its next message
        self.unsure: set[str] = set()  # runs just taken over: their next full entry may be out already
        self.next_discover = 0.0
        self.stats: Counter = Counter()
        self.subscribers: dict[tuple[str, str], int] = {}  # (run id, channel) -> nchan's count at our last publish
        self.delays: list[float] = []  # appended to the log -> published to nchan, seconds, since the last report
        self.lags: dict[str, int] = {}  # run id -> entries of its log not yet published, at the last read
        self.next_report = 0.0
        self._renew = client.register_script(_RENEW)
        self._save = client.register_script(_SAVE)
        self._lock = threading.Lock()  # guards what the lease keeper shares with the publishing loop:
        self.valid: dict[str, float] = {}  # run id -> until when (monotonic) its lease is sure to be ours
        self.taken: dict[str, float] = {}  # run id -> when (monotonic) we took it
        self.lost: set[str] = set()  # runs whose lease the keeper found another's: dropped before the next publish
        self._stop = threading.Event()
        self._keeper: threading.Thread | None = None

    # ------------------------------------------------------------------------------------------ the lease keeper
    def start(self) -> Relay:
        """Renew this relay's leases and announcement from a thread of their own (`manage.py relay`, the benches);
        without it, discover() renews them, between reads and publishes."""
        self.renew()  # announced from the start
        self._keeper = threading.Thread(target=self._keep, name=f"relay-leases-{self.token[:8]}", daemon=True)
        self._keeper.start()
        return self

    def _keep(self) -> None:
        while not self._stop.wait(self.lease_ms / 3000):
            try:
                self.renew()
            except Exception as e:  # (Redis down) the leases lapse on their own: the publishing loop stops with them
                log.warning("relay: could not renew its leases: %s: %s", type(e).__name__, e)

    def renew(self) -> None:
        """Announce this relay and extend the leases it holds; a lease found taken is marked lost."""
        with self._lock:
            held = list(self.cursors)
        sent, now_ms = time.monotonic(), int(time.time() * 1000)
        self.r.zadd(RELAYS_KEY, {self.token: now_ms + self.lease_ms})
        lost = {int(i) for i in self._renew(keys=[lease_key(r) for r in held], args=[self.token, self.lease_ms])
                or ()} if held else set()
        with self._lock:
            for i, run_id in enumerate(held, 1):
                if self.taken.get(run_id, sent) >= sent:
                    continue  # dropped, or taken again, since: this answer is not about the lease we hold
                if i in lost:
                    self.lost.add(run_id)
                else:
                    self.valid[run_id] = max(self.valid[run_id], sent + self.lease_ms / 1000)
            self.stats["renewals"] += 1

    def _still_holds(self, run_id: str) -> bool:
        if not self.holds(run_id) and (self._keeper is None or not self._keeper.is_alive()):  # renew in between
            self.renew()
        return self.holds(run_id)

    def holds(self, run_id: str) -> bool:
        """Whether our lease of the run is sure to be alive now (the fence before each publish)."""
        with self._lock:
            return run_id not in self.lost and time.monotonic() < self.valid.get(run_id, 0.0)

    # ------------------------------------------------------------------------------------------ runs and leases
    def discover(self) -> None:
        """Announce this relay, renew its leases, let idle runs go, take free runs up to its share."""
        if self._keeper is None:
            self.renew()
        self._drop_lost()
        now_ms = int(time.time() * 1000)
        pipe = self.r.pipeline(transaction=False)
        pipe.zremrangebyscore(RELAYS_KEY, "-inf", now_ms)
        pipe.zcard(RELAYS_KEY)
        pipe.zrangebyscore(livelog.RUNS_KEY, now_ms - IDLE_S * 1000, "+inf")
        _, relays, active = pipe.execute()
        active = [text(r) for r in active]
        for run_id in [r for r in self.cursors if r not in set(active)]:
            self._drop(run_id)  # idle: out of the read set
        share = math.ceil(len(active) / max(1, relays))
        for run_id in active:
            if len(self.cursors) >= share:
                break
            sent = time.monotonic()
            if run_id not in self.cursors and self.r.set(lease_key(run_id), self.token, nx=True, px=self.lease_ms):
                self._take(run_id, sent)
        for run_id in list(self.cursors)[share:]:
            self._drop(run_id)  # more than our share (another relay came): hand it back
        self.next_discover = time.monotonic() + DISCOVER_EVERY_S

    def _drop_lost(self) -> None:
        with self._lock:
            lost, self.lost = self.lost & set(self.cursors), set()
        for run_id in lost:
            log.warning("relay: lost the lease of run %s (another relay holds it)", run_id)
            self.stats["leases_lost"] += 1
            self._drop(run_id, release=False)

    def _take(self, run_id: str, sent: float) -> None:
        saved = self.r.get(cursor_key(run_id))
        if saved:
            self.pos[run_id] = pos = Cursor.parse(text(saved))
            cursor = f"{pos.lite}-0"  # lite <= full: what lies between is read again for the lite channel only
            self.unsure.add(run_id)
        else:
            cursor = "0-0"  # new, or appeared while no relay ran: from the start of its log
            self.pos[run_id] = Cursor()
        self.held[run_id], self.due[run_id] = [], 0.0
        with self._lock:
            self.cursors[run_id] = cursor
            self.taken[run_id], self.valid[run_id] = time.monotonic(), sent + self.lease_ms / 1000
            self.lost.discard(run_id)
        self.stats["takeovers"] += 1

    def _drop(self, run_id: str, release: bool = True) -> None:
        with self._lock:
            self.cursors.pop(run_id, None)
            self.valid.pop(run_id, None)
            self.taken.pop(run_id, None)
        for state in (self.pos, self.held, self.due):
            state.pop(run_id, None)
        self.unsure.discard(run_id)
        self.lags.pop(run_id, None)
        if release:
            self.r.eval("if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('del', KEYS[1]) end return 0", 1,
                        lease_key(run_id), self.token)

    def close(self) -> None:
        self._stop.set()
        if self._keeper is not None:
            self._keeper.join()
            self._keeper = None
        for run_id in list(self.cursors):
            if self.held.get(run_id) and self.holds(run_id):  # what is held goes out while the run is still ours
                try:
                    self._flush(run_id)
                except (OSError, redis.RedisError) as e:  # (PushError) the successor publishes it from the cursor
                    log.warning("relay: run %s's held lite entries not published: %s: %s", run_id,
                                type(e).__name__, e)
            self._drop(run_id)
        self.r.zrem(RELAYS_KEY, self.token)

    # ------------------------------------------------------------------------------------------ publishing
    def step(self, block_ms: int) -> int:
        """One read of the held runs' logs (blocking up to block_ms, not past a held lite message's deadline), each
        entry published on the full channel and held for the lite one; then the lite messages due. Returns entries."""
        if time.monotonic() >= self.next_discover:
            self.discover()
        self._drop_lost()
        if not self.cursors:
            time.sleep(min(block_ms / 1000, DISCOVER_EVERY_S))  # nothing to read yet: wait for a run
            return 0
        self._flush_due()
        keys = {livelog.log_key(r): c for r, c in self.cursors.items()}
        block = self._read_block(min(block_ms, int(DISCOVER_EVERY_S * 1000)))
        n = 0
        reply = streams_reply(self.r.xread(keys, count=self.batch, block=block))
        if block is None and not reply:
            time.sleep(POLL_S)
        for key, entries in reply:
            run_id = livelog.run_of(text(key))
            if run_id not in self.cursors or not self._still_holds(run_id):
                continue
            first = livelog.seq_of(entries[0][0])
            if self.cursors[run_id] != "0-0" and first != livelog.seq_of(self.cursors[run_id]) + 1:
                if not self._publish_gap(run_id, first - 1):
                    continue
            for entry_id, fields in entries:
                if not self._still_holds(run_id) or not self._publish(run_id, entry_id, fields):
                    break  # the lease lapsed, or went to another relay: publish nothing more of this run
                n += 1
        self._flush_due()
        self.stats["entries"] += n
        self.report()
        return n

    def drain(self, block_ms: int = 50) -> int:
        """Everything the held runs' logs hold now, the lite channel's held entries included (tests)."""
        total = 0
        self.next_discover = 0.0
        while (n := self.step(block_ms)) > 0:
            total += n
        for run_id in list(self.cursors):
            self._flush(run_id)
        return total

    def _record(self, run_id: str, **changes) -> bool:
        """The run's cursor with these changes, written if the lease is still ours; else the run is let go."""
        pos = self.pos[run_id]
        new = Cursor(**{**pos.__dict__, **changes})
        if not self._save(keys=[lease_key(run_id), cursor_key(run_id)], args=[self.token, str(new), CURSOR_TTL_S]):
            log.warning("relay: lost the lease of run %s before recording entry %d", run_id, new.full)
            self.stats["leases_lost"] += 1
            self._drop(run_id, release=False)
            return False
        self.pos[run_id] = new
        return True

    def _last_id(self, run_id: str, channel: str) -> str:
        """nchan's last message id on the channel ("": none, or the channel is gone: nginx restarted)."""
        info = self.pub.info(run_id, channel)
        last = str((info or {}).get("last_message_id") or "")
        return "" if last == "0:0" else last  # (a channel made by viewers: push.conf lets them in before any publish)

    def _post(self, run_id: str, channel: str, body: list[dict], saved: str, seq: int) -> str:
        """One message on the channel; returns nchan's id for it."""
        info = self.pub.publish(run_id, protocol.encode(body[0] if len(body) == 1 else body), channel)
        new = str(info.get("last_message_id") or "")
        if saved and new and not _id_after(new, saved):
            # nginx restarted between two publishes, in the same second: a viewer resuming after its last id skips
            # this message; a gap frame in a later second tells it to refetch
            _after_second_of(saved)
            gap = protocol.encode({"type": "gap", "run_id": run_id, "seq": seq})
            new = str(self.pub.publish(run_id, gap, channel).get("last_message_id") or "")
            self.stats["gaps"] += 1
        self.subscribers[run_id, channel] = int(info.get("subscribers") or 0)
        return new

    def _publish(self, run_id: str, entry_id, fields: dict) -> bool:
        """The entry on the full channel (unless it is there already), and held for the lite one."""
        seq, t, frames = livelog.decode_entry(run_id, entry_id, fields)
        for f in frames:
            f.pop("t", None)
        pos = self.pos[run_id]
        if seq > pos.full:
            try:
                last = self._last_id(run_id, "") if run_id in self.unsure else None
                if last and pos.full_id and last != pos.full_id:  # a dead relay, or our failed try, published it
                    new = last
                else:
                    if last == "" and pos.full_id:  # the channel is gone (nginx restarted): ids after the viewers'
                        _after_second_of(pos.full_id)
                    new = self._post(run_id, "", frames, pos.full_id, seq)
            except Exception:
                self.unsure.add(run_id)  # the next try checks nchan before publishing again
                raise
            self.unsure.discard(run_id)
            if not self._record(run_id, full=seq, full_id=new):
                return False
            self.stats["frames"] += 1
            self.delays.append(time.time() - t)
        if seq > pos.lite:
            self.held[run_id].append((seq, lite_frames(frames)))
        self.cursors[run_id] = text(entry_id)
        return True

    def _publish_gap(self, run_id: str, seq: int) -> bool:
        """Entries after our cursor were trimmed from the log before we published them: what the lite channel holds
        goes out, then a gap frame on each channel not past it (viewers refetch)."""
        log.warning("relay: run %s's live log was trimmed past our cursor: a gap frame", run_id)
        self.stats["gaps"] += 1
        if not self._flush(run_id):
            return False
        gap = {"type": "gap", "run_id": run_id, "seq": seq}
        pos, ids = self.pos[run_id], {}
        for channel, at, saved in (("", pos.full, pos.full_id), ("lite", pos.lite, pos.lite_id)):
            if at < seq:
                ids[channel] = str(self.pub.publish(run_id, protocol.encode(gap), channel).get("last_message_id")
                                   or saved)
        self.cursors[run_id] = f"{seq}-0"
        return self._record(run_id, full=max(pos.full, seq), full_id=ids.get("", pos.full_id),
                            lite=max(pos.lite, seq), lite_id=ids.get("lite", pos.lite_id))

    def report(self) -> None:
        """Every STATS_EVERY_S: counters, subscribers, lag and the delays since the last report, into
        STATS_KEY:<token> (one hash per relay: /metrics shows each)."""
        if time.monotonic() < self.next_report:
            return
        self.next_report = time.monotonic() + STATS_EVERY_S
        lag = 0
        for run_id, cursor in self.cursors.items():
            last = self.r.xrevrange(livelog.log_key(run_id), count=1)
            if last and cursor != "0-0":
                lag = max(lag, livelog.seq_of(last[0][0]) - livelog.seq_of(cursor))
            elif last:
                lag = max(lag, self.r.xlen(livelog.log_key(run_id)))
        delays, self.delays = sorted(self.delays), []
        fields = {"frames": self.stats["frames"], "entries": self.stats["entries"], "gaps": self.stats["gaps"],
                  "runs": len(self.cursors), "lag_entries": lag, "takeovers": self.stats["takeovers"],
                  "leases_lost": self.stats["leases_lost"], "lite_messages": self.stats["lite_messages"],
                  "subscribers": sum(self.subscribers.values()), "t": time.time(),
                  "delay_p50_s": delays[len(delays) // 2] if delays else 0.0,
                  "delay_max_s": delays[-1] if delays else 0.0}
        key = f"{STATS_KEY}:{self.token}"
        pipe = self.r.pipeline(transaction=False)
        pipe.hset(key, mapping=fields)
        pipe.expire(key, STATS_TTL_S)
        pipe.execute()
