"""The push tier's relay (`manage.py relay`): the ONLY thing that posts to nchan. It reads each run's live log
(webapp.live.livelog: every frame a viewer may see, in order, numbered, appended by ingest after its commit and by
the other producers) and publishes each entry as one message on the run's full channel and one on its lite channel,
the frames carrying the entry's number ("seq"), so a viewer checks for holes and drops repeats whichever relay sent
them.

Relays scale out and fail over: any number run, sharing the runs through a lease per run
(`obs:live:relay:lease:<run>`, SET NX PX with a token unique per process, TTL LEASE_MS; each relay holds at most its
share, ceil(active runs / live relays), announced in RELAYS_KEY). The leases and the announcement are renewed every
LEASE_MS / 3 by a thread of their own (start()), so a publish that nginx holds up longer than the lease costs the
relay nothing. Fencing: a relay publishes an entry only while its lease is sure to be alive (not found lost by the
renewer, and renewed less than LEASE_MS ago by the relay's own clock, counted from before the renewal was sent). The
cursor per run (the last number published, and nchan's last message id on each channel after it) is written after
each entry only while the lease is the writer's (one script: a relay that lost its lease cannot move it), so a relay
killed with -9 is replaced within LEASE_MS + a discovery round, and its successor resumes after the cursor: no hole;
and an entry the dead relay published but could not record is recognised by nchan's last message id on that channel
and not sent again: no duplicate. A cursor older than the log's window (a relay down longer than it keeps) is
followed by a "gap" frame (the page refetches the window over HTTP). Runs idle for IDLE_S leave the read set; a run
with no cursor (new, or appeared while no relay ran) is read from the start of its log.
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
from webapp.metrics.leases import _RENEW

log = logging.getLogger("observatory.relay")

DISCOVER_EVERY_S = 0.5
LEASE_MS = 3000  # a dead relay's runs are taken over within this and one discovery round
IDLE_S = 600.0  # a run with no append for this long leaves the read set (its cursor stays for when it returns)
CURSOR_TTL_S = 7 * 86_400
SINCE_MARGIN_S = 30  # a first subscription replays nchan's buffer from this long before its page was made
LEASE_PREFIX = f"{contract.PREFIX}:live:relay:lease:"
RELAYS_KEY = f"{contract.PREFIX}:live:relays"  # ZSET relay token -> its announcement's expiry (ms)

STATS_KEY = f"{contract.PREFIX}:relay:stats"  # HASH per relay: STATS_KEY:<token>, refreshed for /metrics
STATS_EVERY_S = 2.0
STATS_TTL_S = 60


# The "lite" channel (run/<id>/lite): the series the default dashboard shows (its charts, the router panel's first
# layer, the data panel: ~34 of the demo's ~240), so its many viewers get ~3 KB frames instead of ~20 KB. A page that
# wants any other series watches the full channel (run/<id>) instead (static/js/live.js).
LITE_NAMES = frozenset({"train/loss", "train/cross_entropy_loss", "optim/learning_rate", "grad/norm/total",
                        "throughput/tokens_per_second", "throughput/mfu", "moe/drop_fraction", "mixture/stage",
                        "train/router/layer_0/max_mean_load", "train/router/layer_0/capacity_overflow_rate"})
LITE_PREFIXES = ("train/loss/", "mixture/weight/", "train/router/layer_0/routing_hist/")


cursor_key = livelog.relay_cursor_key  # "<seq> <nchan id, full> <nchan id, lite>": the last entry published


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
    """Page-data contributor: `live_push` ({"path": where to subscribe, "since": a message id a little before this
    page's data was read}) when there is a push tier; the page then subscribes there instead of the hub."""
    if settings.OBS_LIVE_PUSH_URL:
        since = f"{int(time.time()) - SINCE_MARGIN_S}:0"
        page["live_push"] = {"path": settings.OBS_LIVE_SUBSCRIBE_PATH, "since": since,
                             "lite": {"names": sorted(LITE_NAMES), "prefixes": list(LITE_PREFIXES)}}


def lite_frames(frames: list[dict]) -> list[dict]:
    """An entry's frames as the lite channel carries them: updates with only LITE series (rewinds, events, the
    summary always); every frame kept, so the lite channel has every number too (its viewers' hole check)."""
    out = []
    for f in frames:
        if f.get("type") == "update" and f.get("series"):
            f = {**f, "series": {n: s for n, s in f["series"].items()
                                 if n in LITE_NAMES or n.startswith(LITE_PREFIXES)}}
        out.append(f)
    return out


# KEYS: lease, cursor; ARGV: token, cursor value, ttl -> 1 written, 0 the lease is not ours
_SAVE = """
if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('set', KEYS[2], ARGV[2], 'EX', ARGV[3])
return 1
"""


class Relay:
    """Publishes the live logs of the runs it holds. Call step() in a loop; close() hands its runs back."""

    def __init__(self, client: redis.Redis, publisher: NchanPublisher, batch: int = 500, lease_ms: int = LEASE_MS,
                 token: str | None = None):
        self.r, self.pub, self.batch, self.lease_ms = client, publisher, batch, lease_ms
        self.token = token or uuid.uuid4().hex
        self.cursors: dict[str, str] = {}  # run id -> last log entry id published (the runs held)
        self.nchan_ids: dict[str, list[str]] = {}  # run id -> nchan's last message id on [full, lite]
        self.unsure: set[str] = set()  # runs just taken over: their next entry may be out already
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
            seq, *ids = text(saved).split(" ")
            cursor = f"{seq}-0"
            self.nchan_ids[run_id] = (ids + ["", ""])[:2]
            self.unsure.add(run_id)
        else:
            cursor = "0-0"  # new, or appeared while no relay ran: from the start of its log
            self.nchan_ids[run_id] = ["", ""]
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
        self.nchan_ids.pop(run_id, None)
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
            self._drop(run_id)
        self.r.zrem(RELAYS_KEY, self.token)

    # ------------------------------------------------------------------------------------------ publishing
    def step(self, block_ms: int) -> int:
        """One read (blocking up to block_ms) of the held runs' logs, published entry by entry; returns entries."""
        if time.monotonic() >= self.next_discover:
            self.discover()
        self._drop_lost()
        if not self.cursors:
            time.sleep(min(block_ms / 1000, DISCOVER_EVERY_S))  # nothing to read yet: wait for a run
            return 0
        keys = {livelog.log_key(r): c for r, c in self.cursors.items()}
        block = min(block_ms, int(DISCOVER_EVERY_S * 1000))
        n = 0
        for key, entries in streams_reply(self.r.xread(keys, count=self.batch, block=block)):
            run_id = livelog.run_of(text(key))
            if run_id not in self.cursors or not self._still_holds(run_id):
                continue
            if self.cursors[run_id] != "0-0" and livelog.seq_of(entries[0][0]) != livelog.seq_of(
                    self.cursors[run_id]) + 1:
                self._publish_gap(run_id, livelog.seq_of(entries[0][0]) - 1)
            for entry_id, fields in entries:
                if not self._still_holds(run_id) or not self._publish(run_id, entry_id, fields):
                    break  # the lease lapsed, or went to another relay: publish nothing more of this run
                n += 1
        self.stats["entries"] += n
        self.report()
        return n

    def drain(self, block_ms: int = 50) -> int:
        """Everything the held runs' logs hold now (tests, --once)."""
        total = 0
        self.next_discover = 0.0
        while (n := self.step(block_ms)) > 0:
            total += n
        return total

    def _publish(self, run_id: str, entry_id, fields: dict) -> bool:
        seq, t, frames = livelog.decode_entry(run_id, entry_id, fields)
        for f in frames:
            f.pop("t", None)
        saved = self.nchan_ids[run_id]  # nchan's last ids as recorded with the cursor
        ids = list(saved)
        try:
            for i, (channel, body) in enumerate((("", frames), ("lite", lite_frames(frames)))):
                known = saved[i] not in ("", "-")
                if run_id in self.unsure:  # did a dead relay, or our own failed try, publish this entry already?
                    info = self.pub.info(run_id, channel)
                    if info and str(info.get("last_message_id") or "0:0") == "0:0":
                        info = None  # made by viewers (push.conf lets them in before any publish): no message yet
                    last = str(info.get("last_message_id") or "") if info else ""
                    if last and known and last != saved[i]:
                        ids[i] = last
                        continue
                    if not info and known:  # the channel is gone (nginx restarted): ids after the viewers' own
                        _after_second_of(saved[i])
                info = self.pub.publish(run_id, protocol.encode(body[0] if len(body) == 1 else body), channel)
                ids[i] = str(info.get("last_message_id") or "")
                if known and ids[i] and not _id_after(ids[i], saved[i]):
                    # nginx restarted between two publishes, in the same second: a viewer resuming after its last
                    # id skips this message; a gap frame in a later second tells it to refetch
                    _after_second_of(saved[i])
                    gap = protocol.encode({"type": "gap", "run_id": run_id, "seq": seq})
                    ids[i] = str(self.pub.publish(run_id, gap, channel).get("last_message_id") or "")
                    self.stats["gaps"] += 1
                self.subscribers[run_id, channel] = int(info.get("subscribers") or 0)
        except Exception:
            self.unsure.add(run_id)  # the next try checks nchan before publishing again
            raise
        self.unsure.discard(run_id)
        if not self._save(keys=[lease_key(run_id), cursor_key(run_id)],
                          args=[self.token, f"{seq} {ids[0] or '-'} {ids[1] or '-'}", CURSOR_TTL_S]):
            log.warning("relay: lost the lease of run %s before recording entry %d", run_id, seq)
            self.stats["leases_lost"] += 1
            self._drop(run_id, release=False)
            return False
        self.nchan_ids[run_id] = ids
        self.cursors[run_id] = text(entry_id)
        self.stats["frames"] += 1
        self.delays.append(time.time() - t)
        return True

    def _publish_gap(self, run_id: str, seq: int) -> None:
        """Entries after our cursor were trimmed from the log before we published them: viewers refetch."""
        log.warning("relay: run %s's live log was trimmed past our cursor: a gap frame", run_id)
        self.stats["gaps"] += 1
        gap = protocol.encode({"type": "gap", "run_id": run_id, "seq": seq})
        for i, channel in enumerate(("", "lite")):
            self.nchan_ids[run_id][i] = str(self.pub.publish(run_id, gap, channel).get("last_message_id") or "")

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
                  "leases_lost": self.stats["leases_lost"],
                  "subscribers": sum(self.subscribers.values()), "t": time.time(),
                  "delay_p50_s": delays[len(delays) // 2] if delays else 0.0,
                  "delay_max_s": delays[-1] if delays else 0.0}
        key = f"{STATS_KEY}:{self.token}"
        pipe = self.r.pipeline(transaction=False)
        pipe.hset(key, mapping=fields)
        pipe.expire(key, STATS_TTL_S)
        pipe.execute()
