"""The push tier's lite channel (run/<id>/lite) and the relay's cursor (webapp.live.relay).

The lite channel carries the series the default dashboard shows (its charts, the router panel's first layer, the
data panel: ~34 of the demo's ~240), so its many viewers (the public crowd, embeds) get ~3 KB frames instead of
~20 KB; a page that wants any other series watches the full channel (run/<id>) instead (static/js/live.js).

Under a crowd it is paced (conflation): while a run's lite channel has at least OBS_LIVE_PACE_VIEWERS subscribers
(webapp/settings.py; nchan's answer to each publish carries the count, so the relay learns it with no request of its
own), the relay publishes it at most once per OBS_LIVE_PACE_MS, each message carrying every entry since the last one
(each entry's frames keep their own "seq", in order, in one JSON array). Below the threshold every entry goes out at
once, one message each, as on the full channel (which is never paced). A viewer's cost on the push tier is one socket
write per message whatever the message holds, so a crowd's cost is bounded by the pace, not by the trainer's step
rate, while a page among few viewers keeps the per-step latency. An entry after a quiet spell goes out at once.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from django.conf import settings

# Entries per lite message: one message per pace up to 24 steps/s; a backlog (after a push-tier outage) goes out in
# messages of this many, back to back. With deploy/push.conf's lite window (60 messages) it bounds what a resume
# returns: at most 480 entries (~1.6 MB at the demo's lite width), however fast the trainer.
LITE_MAX_ENTRIES = 8
REDIS_TIMER_MS = 100  # Redis ends a blocked read's wait on its timer (hz 10): up to this late
POLL_S = 0.005  # the relay's read interval within REDIS_TIMER_MS of a held lite message's deadline

LITE_NAMES = frozenset({"train/loss", "train/cross_entropy_loss", "optim/learning_rate", "grad/norm/total",
                        "throughput/tokens_per_second", "throughput/mfu", "moe/drop_fraction", "mixture/stage",
                        "train/router/layer_0/max_mean_load", "train/router/layer_0/capacity_overflow_rate"})
LITE_PREFIXES = ("train/loss/", "mixture/weight/", "train/router/layer_0/routing_hist/")


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


@dataclass
class Cursor:
    """A run's publishing position, kept in Redis (livelog.relay_cursor_key) as
    "<full seq> <nchan id, full> <nchan id, lite> <lite seq> [<pending>]": the last entry published on each channel
    (lite <= full: the lite channel lags by up to the pace), nchan's last message id on each after it ("-": none),
    and, while a lite message is being published, the last entry it carries (written before the publish: a successor
    that finds nchan's lite id moved knows that message went out, and skips every entry in it). The old form
    "<seq> <full id> <lite id>" reads as both channels at <seq>; a relay of that form reads the first three fields."""

    full: int = 0
    full_id: str = ""
    lite_id: str = ""
    lite: int = 0
    pending: int | None = None

    @classmethod
    def parse(cls, value: str) -> Cursor:
        seq, full_id, lite_id, *rest = value.split(" ")
        ids = ["" if i == "-" else i for i in (full_id, lite_id)]
        lite = int(rest[0]) if rest else int(seq)
        return cls(int(seq), ids[0], ids[1], lite, int(rest[1]) if len(rest) > 1 else None)

    def __str__(self) -> str:
        pending = "" if self.pending is None else f" {self.pending}"
        return f"{self.full} {self.full_id or '-'} {self.lite_id or '-'} {self.lite}{pending}"


class LitePacing:
    """The relay's lite channel (mixed into webapp.live.relay.Relay, whose state and publishing it uses): entries
    held per run (`held`), published together once `due`, their last number written ahead in the cursor."""

    held: dict[str, list[tuple[int, list[dict]]]]
    due: dict[str, float]
    pos: dict[str, Cursor]
    subscribers: dict[tuple[str, str], int]
    pace_viewers: float | None = None  # None: settings.OBS_LIVE_PACE_VIEWERS (a test sets its own)
    pace_ms: float | None = None  # None: settings.OBS_LIVE_PACE_MS

    @property
    def pace_s(self) -> float:
        return (settings.OBS_LIVE_PACE_MS if self.pace_ms is None else self.pace_ms) / 1000

    def paced(self, run_id: str) -> bool:
        """Whether the run's lite channel is paced now: its subscribers at our last lite publish (0 before one)."""
        viewers = settings.OBS_LIVE_PACE_VIEWERS if self.pace_viewers is None else self.pace_viewers
        return self.subscribers.get((run_id, "lite"), 0) >= viewers

    def _read_block(self, block_ms: int) -> int | None:
        """XREAD's block time: no further than the first held lite message's deadline. Redis checks a blocked read's
        timeout only every 1/hz (100 ms by default), so within that of the deadline the relay polls (None: no
        block; the caller sleeps POLL_S after an empty read) instead of blocking past it."""
        dues = [self.due[r] for r, held in self.held.items() if held and self.paced(r)]
        if not dues:
            return block_ms
        left_ms = math.ceil((min(dues) - time.monotonic()) * 1000) - REDIS_TIMER_MS
        return min(block_ms, left_ms) if left_ms >= 1 else None

    def _flush_due(self) -> None:
        now = time.monotonic()
        for run_id in [r for r, held in self.held.items() if held and (self.due[r] <= now or not self.paced(r))]:
            self._flush(run_id)

    def _flush(self, run_id: str) -> bool:
        """What the run holds for the lite channel, published now: paced, in messages of LITE_MAX_ENTRIES at most,
        else one message per entry; each message's last number written ahead in the cursor. False when the run was
        let go (the lease is not ours)."""
        held = self.held.get(run_id)
        if not held:
            return True
        if not self._still_holds(run_id) or not self._settle_lite(run_id):
            return False
        while held:
            batch = held[:LITE_MAX_ENTRIES if self.paced(run_id) else 1]
            upto = batch[-1][0]
            if not self._record(run_id, pending=upto):
                return False
            body = [f for _, frames in batch for f in frames]
            began = time.monotonic()
            new = self._post(run_id, "lite", body, self.pos[run_id].lite_id, upto)
            if not self._record(run_id, lite=upto, lite_id=new, pending=None):
                return False
            del held[:len(batch)]
            self.due[run_id] = began + self.pace_s  # (counted from the publish's start: a slow nginx is no slower)
            self.stats["lite_messages"] += 1
        return True

    def _settle_lite(self, run_id: str) -> bool:
        """A lite message named in the cursor but not recorded as out (a dead relay's, or our own failed try): if
        nchan's last lite id moved past the recorded one, it went out, and its entries are not sent again."""
        pos = self.pos[run_id]
        if pos.pending is None:
            return True
        last = self._last_id(run_id, "lite")
        if not last or last == pos.lite_id:
            self.pos[run_id].pending = None  # not out (the next record clears it in Redis)
            return True
        self.held[run_id][:] = [(seq, frames) for seq, frames in self.held[run_id] if seq > pos.pending]
        return self._record(run_id, lite=pos.pending, lite_id=last, pending=None)
