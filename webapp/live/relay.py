"""The push tier's relay (`manage.py relay`): each run's points and rewinds, read from its Redis telemetry stream
(the durable, ordered log) as they arrive and published to the run's nchan channel, in parallel with ingest's SQL
storage, so a viewer's delay no longer includes the database write.

Frames are the "update" frames the dashboard already parses (webapp.live.protocol): the entries of one read, per
run, make one frame, in stream order; a rewind in them cuts the points before it that storage will not keep, and
travels as `rewinds` so viewers cut what they hold. Entries the contract refuses (ingest dead-letters them) are
never published. Events, the run's summary and feature frames come from their producers after they commit
(webapp.live.push, webapp.annotations.live). The relay reads with XREAD (no consumer group: it acknowledges
nothing and holds nothing back from ingest) from a cursor per run kept in Redis after each publish, so a restarted
relay resumes where it stopped: no hole (a frame published just before a crash may come twice; viewers drop
points they hold and a repeated rewind is followed by the points after it).
"""

from __future__ import annotations

import logging
import time
from collections import Counter

import redis
from django.conf import settings

from observatory import contract
from observatory.downsample import classify
from observatory.streams import streams_reply, text
from observatory.streams.nchan import NchanPublisher
from webapp.live import protocol
from webapp.metrics.changes import RunChanges
from webapp.metrics.ingest import STREAM_PATTERN, run_of

log = logging.getLogger("observatory.relay")

DISCOVER_EVERY_S = 1.0
SCAN_EVERY_S = 10.0
CURSOR_TTL_S = 7 * 86_400
SINCE_MARGIN_S = 30  # a first subscription replays nchan's buffer from this long before its page was made
FRESH_MAX = 10_000  # a run that appears while the relay runs is relayed from its first entry unless it has more


STATS_KEY = f"{contract.PREFIX}:relay:stats"  # HASH the relay refreshes for /metrics (webapp.live.metrics)
STATS_EVERY_S = 5.0
STATS_TTL_S = 60


# The "lite" channel (run/<id>/lite): the series the default dashboard shows (its charts, the router panel's first
# layer, the data panel: ~34 of the demo's ~240), so its many viewers get ~3 KB frames instead of ~20 KB. A page that
# wants any other series watches the full channel (run/<id>) instead (static/js/live.js).
LITE_NAMES = frozenset({"train/loss", "train/cross_entropy_loss", "optim/learning_rate", "grad/norm/total",
                        "throughput/tokens_per_second", "throughput/mfu", "moe/drop_fraction", "mixture/stage",
                        "train/router/layer_0/max_mean_load", "train/router/layer_0/capacity_overflow_rate"})
LITE_PREFIXES = ("train/loss/", "mixture/weight/", "train/router/layer_0/routing_hist/")


def cursor_key(run_id: str) -> str:
    """A STRING: the last telemetry entry id the relay published for the run."""
    return contract.run_key(run_id, "relay")


def add_page_data(request, run, page: dict) -> None:
    """Page-data contributor: `live_push` ({"path": where to subscribe, "since": a message id a little before this
    page's data was read}) when there is a push tier; the page then subscribes there instead of the hub."""
    if settings.OBS_LIVE_PUSH_URL:
        since = f"{int(time.time()) - SINCE_MARGIN_S}:0"
        page["live_push"] = {"path": settings.OBS_LIVE_SUBSCRIBE_PATH, "since": since,
                             "lite": {"names": sorted(LITE_NAMES), "prefixes": list(LITE_PREFIXES)}}


def update_frame(run_id: str, entries) -> dict | None:
    """One read's entries of a run, in stream order -> an "update" frame of its points and rewinds, or None."""
    ch = RunChanges()
    for _entry_id, fields in entries:
        if not fields:
            continue
        try:
            msg = contract.decode(fields, expect_run=run_id)
        except contract.ContractError:
            continue  # ingest dead-letters it: storage keeps nothing of it, so no viewer sees it
        if msg.kind == "metrics":
            step = msg.data["step"]
            for name, x in msg.data["values"].items():
                ch.add_point(name, step, *classify(x))
            ch.times[step] = msg.data["t"]
        elif msg.kind == "rewind":
            ch.rewind(msg.data["from_step"], msg.data["to_step"])
    ch.points = {name: pts for name, pts in ch.points.items() if pts}
    if not (ch.points or ch.rewinds):
        return None
    body = protocol.update_body(ch)
    del body["events"]
    return {"type": "update", "run_id": run_id, **body}  # with "t", the newest step's publish time: pop it to send


def lite_frame(frame: dict) -> dict | None:
    """An update frame as the lite channel carries it: only LITE series (rewinds always); None if nothing is left."""
    series = {n: s for n, s in frame["series"].items() if n in LITE_NAMES or n.startswith(LITE_PREFIXES)}
    if not series and not frame["rewinds"]:
        return None
    return {**frame, "series": series}


class Relay:
    """Reads every run's telemetry stream from its cursor and publishes what arrives. Call step() in a loop."""

    def __init__(self, client: redis.Redis, publisher: NchanPublisher, batch: int = 500):
        self.r, self.pub, self.batch = client, publisher, batch
        self.cursors: dict[str, str] = {}  # stream -> last entry id published
        self.started = False
        self.next_discover = self.next_scan = 0.0
        self.scanned: set[str] = set()
        self.stats: Counter = Counter()
        self.subscribers: dict[tuple[str, str], int] = {}  # (run id, channel) -> nchan's count at our last publish
        self.delays: list[float] = []  # publish by the trainer -> published to nchan, seconds, since the last report
        self.next_report = 0.0

    def discover(self) -> None:
        found = {contract.telemetry_stream(r) for r in map(text, self.r.smembers(contract.RUNS_KEY))
                 if contract.RUN_ID_RE.match(r)}
        if time.monotonic() >= self.next_scan:
            self.scanned = {text(k) for k in self.r.scan_iter(match=STREAM_PATTERN, count=1000, _type="STREAM")}
            self.next_scan = time.monotonic() + SCAN_EVERY_S
        for stream in sorted((found | self.scanned) - self.cursors.keys()):
            run_id = run_of(stream)
            if run_id is not None:
                self.cursors[stream] = self._start(stream, run_id)
        self.started = True
        self.next_discover = time.monotonic() + DISCOVER_EVERY_S

    def _start(self, stream: str, run_id: str) -> str:
        """Where a newly found stream is read from: its cursor; a run that appeared while we run, its start; else
        its end (viewers who come now read the history over HTTP)."""
        saved = self.r.get(cursor_key(run_id))
        if saved:
            return text(saved)
        if self.started and self.r.xlen(stream) <= FRESH_MAX:
            return "0-0"
        last = self.r.xrevrange(stream, count=1)
        return text(last[0][0]) if last else "0-0"

    def step(self, block_ms: int) -> int:
        """One read (blocking up to block_ms), published run by run; returns the entries read."""
        if time.monotonic() >= self.next_discover:
            self.discover()
        if not self.cursors:
            time.sleep(min(block_ms / 1000, DISCOVER_EVERY_S))  # nothing to read yet: wait for a run
            return 0
        n = 0
        for stream, entries in streams_reply(self.r.xread(self.cursors, count=self.batch, block=block_ms)):
            stream = text(stream)
            run_id = run_of(stream)
            frame = update_frame(run_id, entries)
            if frame is not None:
                t = frame.pop("t", None)
                info = self.pub.publish(run_id, protocol.encode(frame))  # PushError: the cursor stays, we retry
                self.subscribers[run_id, ""] = int(info.get("subscribers") or 0)
                lite = lite_frame(frame)
                if lite is not None:
                    info = self.pub.publish(run_id, protocol.encode(lite), "lite")
                    self.subscribers[run_id, "lite"] = int(info.get("subscribers") or 0)
                self.stats["frames"] += 1
                if t:
                    self.delays.append(time.time() - t)
            last = text(entries[-1][0])
            self.r.set(cursor_key(run_id), last, ex=CURSOR_TTL_S)
            self.cursors[stream] = last
            n += len(entries)
        self.stats["entries"] += n
        self.report()
        return n

    def report(self) -> None:
        """Every STATS_EVERY_S: counters, subscribers and the delays since the last report, into STATS_KEY."""
        if time.monotonic() < self.next_report:
            return
        self.next_report = time.monotonic() + STATS_EVERY_S
        delays, self.delays = sorted(self.delays), []
        fields = {"frames": self.stats["frames"], "entries": self.stats["entries"],
                  "subscribers": sum(self.subscribers.values()), "t": time.time(),
                  "delay_p50_s": delays[len(delays) // 2] if delays else 0.0,
                  "delay_max_s": delays[-1] if delays else 0.0}
        pipe = self.r.pipeline(transaction=False)
        pipe.hset(STATS_KEY, mapping=fields)
        pipe.expire(STATS_KEY, STATS_TTL_S)
        pipe.execute()
