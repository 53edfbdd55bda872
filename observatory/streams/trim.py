"""Keeping a run's telemetry stream bounded without losing what ingest has not read, and counting what is lost.

Producers (the trainer's Publisher, the web's HTTP intake) XADD without MAXLEN and call `trim_telemetry` every
contract.TRIM_EVERY_S (`maybe_trim` shares that schedule between processes through a key with a TTL). Past
`cap` entries, one Lua script (atomic: no group moves in between) trims with XTRIM MINID to the slowest consumer
group's safe point, the oldest of its last-delivered id and its oldest pending entry: only entries every group has
acknowledged go. Entries not yet acknowledged are kept up to `hard_cap`; past it the oldest are trimmed anyway (Redis
memory is finite), as they are past `cap` on a stream no group reads (nobody ever will: no ingest runs). Those
are the losses: counted in contract.telemetry_lost_key (HINCRBY "trimmed") and announced on the stream itself as an
`event` named contract.TELEMETRY_LOST_EVENT, which ingest turns into a critical anomaly. Publishers report the
entries their full queue dropped the same way (`loss_event`, "dropped").
"""

from __future__ import annotations

import time

import redis as redis_lib

from observatory import contract
from observatory.streams.consumer import newest_metrics_step

# KEYS: stream, lost hash. ARGV: cap, hard cap. Returns {trimmed unread, trimmed acknowledged, length after, groups}.
_TRIM = """
local len = redis.call('XLEN', KEYS[1])
local cap, hard = tonumber(ARGV[1]), tonumber(ARGV[2])
if len <= cap then return {0, 0, len, -1} end
local groups = redis.call('XINFO', 'GROUPS', KEYS[1])
local limit, acked = cap, 0
if #groups > 0 then
  local safe_ms, safe_seq = nil, nil
  local function older(id)
    local ms, seq = string.match(id, '^(%d+)-(%d+)$')
    ms, seq = tonumber(ms), tonumber(seq)
    if safe_ms == nil or ms < safe_ms or (ms == safe_ms and seq < safe_seq) then safe_ms, safe_seq = ms, seq end
  end
  for _, g in ipairs(groups) do
    local f = {}
    for i = 1, #g, 2 do f[g[i]] = g[i + 1] end
    older(f['last-delivered-id'])
    if tonumber(f['pending']) > 0 then older(redis.call('XPENDING', KEYS[1], f['name'])[2]) end
  end
  acked = redis.call('XTRIM', KEYS[1], 'MINID', safe_ms .. '-' .. safe_seq)
  len = len - acked
  limit = hard
end
local lost = 0
if len > limit then
  lost = redis.call('XTRIM', KEYS[1], 'MAXLEN', limit)
  redis.call('HINCRBY', KEYS[2], 'trimmed', lost)
  len = len - lost
end
return {lost, acked, len, #groups}
"""


def _caps(cap: int | None, hard_cap: int | None) -> tuple[int, int]:
    cap = contract.STREAM_MAXLEN if cap is None else int(cap)
    hard_cap = contract.STREAM_HARD_MAXLEN if hard_cap is None else int(hard_cap)
    if not 0 < cap <= hard_cap:
        raise ValueError(f"stream caps must be 0 < cap <= hard_cap (got cap={cap}, hard_cap={hard_cap})")
    return cap, hard_cap


def trim_telemetry(client: redis_lib.Redis, run_id: str, cap: int | None = None, hard_cap: int | None = None,
                   step: int | None = None) -> dict:
    """Apply the caps (module docstring) to the run's stream now. Returns {"lost", "acknowledged", "length"}: the
    entries trimmed unread (counted and announced), those trimmed acknowledged, and the length left. `step`: the
    run's newest step for the announcement (else read from the stream)."""
    cap, hard_cap = _caps(cap, hard_cap)
    lost, acked, length, groups = client.eval(_TRIM, 2, contract.telemetry_stream(run_id),
                                              contract.telemetry_lost_key(run_id), cap, hard_cap)
    if lost:
        total = int(client.hget(contract.telemetry_lost_key(run_id), "trimmed") or 0)
        if step is None:
            step = newest_metrics_step(client, run_id) or 0
        why = (f"ingest fell {hard_cap:,} entries behind (the stream's hard cap)" if groups else
               f"no consumer group reads the stream (no ingest) and it passed its cap of {cap:,} entries")
        client.xadd(contract.telemetry_stream(run_id), loss_event(run_id, "trimmed", lost, total, step, why))
    return {"lost": lost, "acknowledged": acked, "length": length}


def maybe_trim(client: redis_lib.Redis, run_id: str, cap: int | None = None,
               hard_cap: int | None = None) -> dict | None:
    """trim_telemetry when no producer of the run did within contract.TRIM_EVERY_S (None when not due)."""
    every_ms = int(contract.TRIM_EVERY_S * 1000)
    if every_ms > 0 and not client.set(contract.telemetry_trim_key(run_id), "1", nx=True, px=every_ms):
        return None
    return trim_telemetry(client, run_id, cap, hard_cap)


def loss_event(run_id: str, how: str, lost: int, total: int, step: int, why: str) -> dict[str, str]:
    """The stream entry announcing `lost` entries lost (`how`: "trimmed" | "dropped"; `total`: the run's count of
    that kind so far)."""
    return contract.encode(run_id, "event", {"t": time.time(), "step": int(step), "name": contract.TELEMETRY_LOST_EVENT,
                                             "payload": {"how": how, "lost": int(lost), "total": int(total),
                                                         "why": why}})
