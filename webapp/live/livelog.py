"""The run's live log: ONE Redis stream per run, `obs:run:<id>:live`, holding every frame a viewer may see — points
and rewinds (committed by ingest), events, the run's summary, new series, anomalies, annotation references, health
changes — each appended once, in order, under a per-run sequence number. It is the only source of the public live
path: the relay (webapp.live.relay) is the only thing that posts to the push tier (nchan), and the hub
(webapp.live.hub) serves the same entries with the same numbers; both resume from it.

An entry is one message (the frames that belong together: a step's points and the anomaly about them), its id
`<seq>-0`, so the id IS the sequence number: XRANGE by number, no counter key to lose. A new log starts at
Redis' current time in microseconds (a log re-created after Redis lost it keeps increasing; below 2^53, exact in a
browser), then counts by one; the first append after a Redis restart numbers from the clock too, so a restart that
lost the log's tail never gives a number a viewer saw to other frames (the viewer sees a hole and refetches). Appending
is one Redis script (one round trip, nothing else on the writer's thread: no process on the durable path waits on
the push tier). The log keeps WINDOW entries (ten minutes at 5 steps/s): what a resume can replay; a reader that
fell further behind gets a "gap" and refetches the window over HTTP. The relays count as a reader: while their
cursor is behind, the entries after it are kept past the window, up to RELAY_HOLD_MAX. User-written text never enters it
(webapp.annotations.live sends references)."""

from __future__ import annotations

import json
import time

import redis

from observatory import contract
from webapp.live.protocol import encode

WINDOW = 3000  # entries kept per run: what a resume replays (ten minutes at 5 steps/s)
RELAY_HOLD_MAX = 6000  # entries kept past WINDOW while the relays' cursor is behind (their outage: twenty minutes)
RUNS_KEY = f"{contract.PREFIX}:live:runs"  # ZSET run id -> the time of its last append (ms): the relays' read set
LOG_TTL_S = 7 * 86_400  # a run silent this long leaves nothing behind

# KEYS: log, runs, relays' cursor, the id of the Redis server that appended last; ARGV: frames (JSON list),
# window, run id, ttl, hold max -> the entry's number.
# The trim counts the relays as a reader: entries after their cursor (the lite channel's number where the cursor has
# one: it lags the full one) are kept (up to the hold max) past the window.
# The first append after a Redis restart (a server id other than the last appender's) numbers from the clock: a
# restart that lost the log's tail (an append-only file fsynced every second) never gives a number twice.
_APPEND = """
local last = redis.call('xrevrange', KEYS[1], '+', '-', 'COUNT', 1)
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local floor = tonumber(t[1]) * 1000000 + tonumber(t[2])
local server = string.match(redis.call('info', 'server'), 'run_id:(%w+)')
local seq = floor
if last[1] then
  seq = tonumber(string.match(last[1][1], '^(%d+)')) + 1
  if redis.call('get', KEYS[4]) ~= server and seq < floor then seq = floor end
end
if redis.call('get', KEYS[4]) ~= server then redis.call('set', KEYS[4], server) end
local keep = tonumber(ARGV[2])
local cursor = redis.call('get', KEYS[3])
if cursor then
  local upto = tonumber(string.match(cursor, '^(%d+)'))
  local lite = string.match(cursor, '^%d+ %S+ %S+ (%d+)')
  if lite and tonumber(lite) < upto then upto = tonumber(lite) end
  local behind = seq - upto
  if behind > keep then keep = math.min(behind, tonumber(ARGV[5])) end
end
redis.call('xadd', KEYS[1], 'MAXLEN', keep, string.format('%d-0', seq), 'f', ARGV[1], 't', now)
redis.call('expire', KEYS[1], ARGV[4])
redis.call('expire', KEYS[4], ARGV[4])
redis.call('zadd', KEYS[2], now, ARGV[3])
return seq
"""


def log_key(run_id: str) -> str:
    return contract.run_key(run_id, "live")


def server_key(run_id: str) -> str:
    """The run id of the Redis server that appended the log's last entry (INFO server): a new one has restarted."""
    return contract.run_key(run_id, "live:server")


def relay_cursor_key(run_id: str) -> str:
    """A STRING "<seq> <nchan id, full> <nchan id, lite> <lite seq> [<pending>]" (webapp.live.lite.Cursor): the last
    entry the relays published on each channel; the trim keeps what follows the lower of the two."""
    return contract.run_key(run_id, "relay")


def run_of(key: str) -> str | None:
    parts = key.split(":")
    return parts[2] if len(parts) == 4 and parts[3] == "live" else None


class LiveLog:
    """Appends to runs' live logs through one client (sync: ingest's thread, web views, Celery tasks)."""

    def __init__(self, client: redis.Redis, window: int = WINDOW):
        self.r, self.window = client, window
        self._append = client.register_script(_APPEND)

    def append(self, run_id: str, frames: list[dict]) -> int:
        """One message of frames for the run's viewers, in order; returns its sequence number. Raises what Redis
        raises (a caller on ingest's path leaves its entries unacknowledged, so they are replayed and appended)."""
        if not frames:
            raise ValueError("an entry holds at least one frame")
        return int(self._append(keys=[log_key(run_id), RUNS_KEY, relay_cursor_key(run_id), server_key(run_id)],
                                args=[encode(frames), self.window, run_id, LOG_TTL_S,
                                      max(self.window, RELAY_HOLD_MAX)]))


def seq_of(entry_id) -> int:
    eid = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    return int(eid.split("-", 1)[0])


def decode_entry(run_id: str, entry_id, fields: dict) -> tuple[int, float, list[dict]]:
    """A log entry -> (sequence number, append time in s, its frames, each marked with the run and the number)."""
    seq = seq_of(entry_id)
    raw = fields.get(b"f", fields.get("f"))
    t = fields.get(b"t", fields.get("t"))
    frames = json.loads(raw)
    for f in frames:
        f.setdefault("run_id", run_id)
        f["seq"] = seq
    return seq, (int(t) / 1000 if t else time.time()), frames


def since(client: redis.Redis, run_id: str, after_seq: int, count: int = WINDOW) -> tuple[bool, list]:
    """Entries after `after_seq`, at most `count`: (gap, [(id, fields)]); gap when the first of them is not
    after_seq + 1 (what came between was trimmed, or the reader holds nothing yet: it must refetch over HTTP)."""
    entries = client.xrange(log_key(run_id), f"{after_seq + 1}-0", "+", count=count)
    return bool(entries) and seq_of(entries[0][0]) != after_seq + 1, entries


_logs: dict[int, LiveLog] = {}


def shared() -> LiveLog:
    """The process's LiveLog on webapp.redis's client."""
    from webapp.redis import get_redis

    client = get_redis()
    log = _logs.get(id(client))
    if log is None:
        log = _logs[id(client)] = LiveLog(client)
    return log
