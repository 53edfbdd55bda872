"""Ingest leases in Redis: each telemetry stream is read by one ingest consumer at a time, through a script that
checks the lease and reads in one atomic step (docs/ARCHITECTURE.md "Ingest: replicas, leases, fencing")."""

from __future__ import annotations

import time
from typing import Iterable

import redis

from observatory.streams import text

LEASE_PREFIX = "obs:ingest:lease:"
CONSUMERS_KEY = "obs:ingest:consumers"

_RENEW = """
local lost = {}
for i, key in ipairs(KEYS) do
  if redis.call('get', key) == ARGV[1] then
    redis.call('pexpire', key, ARGV[2])
  else
    lost[#lost + 1] = i
  end
end
return lost
"""
_RELEASE = """
for _, key in ipairs(KEYS) do
  if redis.call('get', key) == ARGV[1] then redis.call('del', key) end
end
return 0
"""
# KEYS: stream1, lease1, stream2, lease2, ...; ARGV: token, group, consumer, count, id1, id2, ...
# Per stream: {stream, "lost"} | {stream, "error", message} | {stream, "ok", entries, read_new}
#             | {stream, "empty", last entry id}. A pending read ("0") that finds nothing goes on to new entries.
_READ = """
local out = {}
for i = 1, #KEYS, 2 do
  local s, lease, id = KEYS[i], KEYS[i + 1], ARGV[4 + (i + 1) / 2]
  if redis.call('get', lease) ~= ARGV[1] then
    out[#out + 1] = {s, 'lost'}
  else
    local r = redis.pcall('xreadgroup', 'GROUP', ARGV[2], ARGV[3], 'COUNT', ARGV[4], 'STREAMS', s, id)
    if type(r) == 'table' and r.err then
      out[#out + 1] = {s, 'error', r.err}
    else
      local entries = r and r[1] and r[1][2] or {}
      local new = 0
      if #entries == 0 and id ~= '>' then
        new = 1
        r = redis.call('xreadgroup', 'GROUP', ARGV[2], ARGV[3], 'COUNT', ARGV[4], 'STREAMS', s, '>')
        entries = r and r[1] and r[1][2] or {}
      elseif id == '>' then
        new = 1
      end
      if #entries > 0 then
        out[#out + 1] = {s, 'ok', entries, new}
      else
        local last = redis.call('xrevrange', s, '+', '-', 'COUNT', 1)
        out[#out + 1] = {s, 'empty', last[1] and last[1][1] or '0-0'}
      end
    end
  end
end
return out
"""


def lease_key(stream: str) -> str:
    return LEASE_PREFIX + stream


class Leases:
    """One consumer's side of the leases: `token` is unique per process, so two processes that were given the
    same consumer name still never both own a stream."""

    def __init__(self, client: redis.Redis, token: str, ttl_ms: int):
        self.r, self.token, self.ttl_ms = client, token, int(ttl_ms)
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)
        self._read = client.register_script(_READ)

    def acquire(self, stream: str) -> bool:
        return bool(self.r.set(lease_key(stream), self.token, nx=True, px=self.ttl_ms))

    def renew(self, streams: Iterable[str]) -> set[str]:
        """Extend the leases we still hold; returns the streams whose lease we no longer hold."""
        streams = list(streams)
        if not streams:
            return set()
        lost = self._renew(keys=[lease_key(s) for s in streams], args=[self.token, self.ttl_ms])
        return {streams[int(i) - 1] for i in lost}

    def release(self, streams: Iterable[str]) -> None:
        streams = list(streams)
        if streams:
            self._release(keys=[lease_key(s) for s in streams], args=[self.token])

    def announce(self) -> int:
        """Say this consumer is alive for one more TTL; returns how many consumers are alive (this one included)."""
        now = int(time.time() * 1000)
        pipe = self.r.pipeline(transaction=False)
        pipe.zadd(CONSUMERS_KEY, {self.token: now + self.ttl_ms})
        pipe.zremrangebyscore(CONSUMERS_KEY, "-inf", now)
        pipe.zcard(CONSUMERS_KEY)
        return max(1, int(pipe.execute()[-1]))

    def leave(self) -> None:
        self.r.zrem(CONSUMERS_KEY, self.token)

    def read(self, group: str, consumer: str, streams: dict[str, str], count: int) -> list[tuple]:
        """XREADGROUP of every stream whose lease we hold ({stream: "0" (own pending first) | ">"}), atomically
        with the lease check. Returns [(stream, status, payload, read_new)], status in ok/empty/lost/error: `ok`
        carries the entries, `empty` the stream's last entry id (for a blocking wait), `error` the message."""
        if not streams:
            return []
        keys, ids = [], []
        for s, i in streams.items():
            keys += [s, lease_key(s)]
            ids.append(i)
        out = []
        for item in self._read(keys=keys, args=[self.token, group, consumer, count, *ids]):
            stream, status = text(item[0]), text(item[1])
            if status == "ok":  # entries as Lua returns them: [id, [field, value, ...] or nil (deleted)]
                entries = [(text(eid), dict(zip(f[::2], f[1::2])) if f else {}) for eid, f in item[2]]
                out.append((stream, status, entries, bool(item[3])))
            else:
                out.append((stream, status, text(item[2]) if len(item) > 2 else None, False))
        return out
