"""The lite channel is paced under a crowd (webapp.live.lite): while nchan counts at least the threshold of lite
subscribers (its answer to each publish), the relay publishes it at most once per pace, each message carrying every
entry since the last; below the threshold, and on the full channel always, one message per entry. A held batch goes
out at its deadline with no further entry; a relay that dies holding entries, or between a lite publish and its
record, is replaced by one that publishes each entry once per channel. Real Redis, real nginx + nchan, the real
database. The tests of the pace itself set the threshold to 0 (always paced)."""

from __future__ import annotations

import json
import time

import pytest

from observatory.streams.nchan import NchanPublisher
from tests.support import wait_for
from webapp.live.lite import LITE_MAX_ENTRIES, Cursor
from webapp.live.livelog import log_key
from webapp.live.relay import Relay, cursor_key

from .test_relay import FROM_START, ingest, nchan, open_channels, relay, relay_all  # noqa: F401  (fixtures)

pytestmark = pytest.mark.django_db(transaction=True)
LOSS = "train/loss"  # a lite series


def _record_publishes(relay: Relay) -> list[tuple[str, float, str]]:
    """(channel, when the publish began (monotonic), its text) of every publish the relay makes from now on; the
    publisher is the real one."""
    sent, publish = [], relay.pub.publish

    def recording(run_id, text, channel=""):
        sent.append((channel, time.monotonic(), text))
        return publish(run_id, text, channel)

    relay.pub.publish = recording
    return sent


def _entry(trainer, ingest, step: int) -> None:
    trainer.metrics_named(step, {LOSS: float(step), "time/step_s": 0.1})
    ingest.drain()  # one log entry


def _frames(text: str) -> list[dict]:
    msg = json.loads(text)
    return msg if isinstance(msg, list) else [msg]


def _contiguous(seqs: list[int]) -> bool:
    return seqs == list(range(seqs[0], seqs[0] + len(seqs)))


def test_entries_faster_than_the_pace_go_out_together_on_lite_and_one_by_one_on_full(relay, nchan, trainer,
                                                                                      ingest, run_id):
    relay.pace_viewers = 0  # always paced
    open_channels(relay, ingest, trainer)
    full, lite = nchan.viewer(run_id, FROM_START), nchan.viewer(run_id, FROM_START, channel="lite")
    sent = _record_publishes(relay)
    for burst in range(4):  # five entries between two reads: faster than the pace
        for step in range(burst * 5, burst * 5 + 5):
            _entry(trainer, ingest, step)
        relay.step(50)
    wait_for(lambda: relay.step(50) >= 0 and not relay.held[run_id], 10, "the last held entries on lite")
    upto = relay.pos[run_id].full  # every entry of the log, on both channels
    full.read_until(lambda: full.seqs and full.seqs[-1] == upto, "every entry on the full channel")
    lite.read_until(lambda: lite.seqs and lite.seqs[-1] == upto, "every entry on the lite channel")
    assert full.received[LOSS] == lite.received[LOSS] == list(range(20))
    assert full.seqs == lite.seqs and _contiguous(lite.seqs), (full.seqs, lite.seqs)  # every number once, in order
    assert full.messages == len(full.seqs)  # the full channel: one message per entry
    assert lite.messages < len(lite.seqs)  # the lite channel: several entries a message
    assert set(lite.points) == {LOSS} and set(full.points) == {LOSS, "time/step_s"}
    lite_sent = [(t, len({f["seq"] for f in _frames(text)})) for channel, t, text in sent if channel == "lite"]
    assert all(b - a >= relay.pace_s or full == LITE_MAX_ENTRIES  # at most one per pace, unless more are held than
               for (a, full), (b, _) in zip(lite_sent, lite_sent[1:])), lite_sent  # one message carries
    full.close()
    lite.close()


def test_a_held_batch_goes_out_at_its_deadline_with_no_further_entry(relay, nchan, trainer, ingest, run_id,
                                                                     redis_client):
    relay.pace_viewers = 0  # always paced
    open_channels(relay, ingest, trainer)
    lite = nchan.viewer(run_id, FROM_START, channel="lite")
    sent = _record_publishes(relay)
    step = iter(range(1000))

    def one_held() -> bool:
        _entry(trainer, ingest, next(step))
        relay.step(50)
        return bool(relay.held[run_id])

    wait_for(one_held, 10, "an entry held for the lite channel", every=0)
    held, due, entries = [seq for seq, _ in relay.held[run_id]], relay.due[run_id], redis_client.xlen(log_key(run_id))
    blocks, xread = [], relay.r.xread

    def recording_xread(streams, count=None, block=None):
        blocks.append((block, bool(relay.held[run_id])))
        return xread(streams, count=count, block=block)

    relay.r.xread = recording_xread
    wait_for(lambda: relay.step(10_000) == 0 and not relay.held[run_id], 10, "the held batch at its deadline")
    assert redis_client.xlen(log_key(run_id)) == entries  # no entry came meanwhile: the deadline sent it
    channel, began, text = sent[-1]
    assert channel == "lite" and began >= due
    assert all((block or 0) <= relay.pace_s * 1000 for block, holding in blocks if holding), blocks  # not past it
    lite.read_until(lambda: lite.seqs and lite.seqs[-1] == held[-1], "the held entries on the lite channel")
    assert lite.seqs[-len(held):] == held and _contiguous(lite.seqs)
    assert Cursor.parse(redis_client.get(cursor_key(run_id)).decode()).lite == held[-1]
    lite.close()


@pytest.mark.parametrize("dies", ["holding", "after_lite_publish"])
def test_a_relay_killed_with_held_lite_entries_is_replaced_with_each_entry_once_per_channel(redis_client, nchan,
                                                                                          trainer, ingest, run_id,
                                                                                          dies):
    """Relay a dies as kill -9 does (no close; its lease left to expire) holding entries it published on the full
    channel only, or right after nchan took its lite message but before it recorded that. Relay b takes the run over,
    publishes on lite what a held (and not what a's last lite message carried), and nothing again on full."""
    a = Relay(redis_client, NchanPublisher(nchan.pub_url), lease_ms=600, token="relay-a")
    b = Relay(redis_client, NchanPublisher(nchan.pub_url), lease_ms=600, token="relay-b")
    a.pace_viewers = b.pace_viewers = 0  # always paced
    open_channels(a, ingest, trainer)
    b.drain()
    assert run_id in a.cursors and run_id not in b.cursors
    full, lite = nchan.viewer(run_id, FROM_START), nchan.viewer(run_id, FROM_START, channel="lite")
    step = iter(range(1000))

    def one_held() -> bool:
        _entry(trainer, ingest, next(step))
        a.step(50)
        return len(a.held[run_id]) >= 2

    wait_for(one_held, 10, "entries held for the lite channel", every=0)
    if dies == "after_lite_publish":
        publish = a.pub.publish

        def then_die(run_id, text, channel=""):
            answer = publish(run_id, text, channel)
            if channel == "lite":
                raise SystemExit("killed after nchan's answer")  # (kill -9: nothing after this runs)
            return answer

        a.pub.publish = then_die
        with pytest.raises(SystemExit):
            a._flush(run_id)  # noqa: SLF001
        assert Cursor.parse(redis_client.get(cursor_key(run_id)).decode()).pending is not None
    wait_for(lambda: b.step(50) >= 0 and run_id in b.cursors, 10, "relay b to take the run over")
    last = next(step)
    _entry(trainer, ingest, last)
    relay_all(b, ingest)
    upto = b.pos[run_id].full
    assert b.pos[run_id].lite == upto
    full.read_until(lambda: full.seqs and full.seqs[-1] == upto, "every entry on the full channel")
    lite.read_until(lambda: lite.seqs and lite.seqs[-1] == upto, "every entry on the lite channel")
    assert full.received[LOSS] == lite.received[LOSS] == list(range(last + 1))
    assert full.seqs == lite.seqs and _contiguous(full.seqs), (full.seqs, lite.seqs)  # no hole, no repeat
    b.close()
    full.close()
    lite.close()


def test_a_relay_closing_publishes_what_it_holds_before_handing_the_run_back(relay, nchan, trainer, ingest, run_id,
                                                                             redis_client):
    relay.pace_viewers = 0  # always paced
    open_channels(relay, ingest, trainer)
    lite = nchan.viewer(run_id, FROM_START, channel="lite")
    step = iter(range(1000))

    def one_held() -> bool:
        _entry(trainer, ingest, next(step))
        relay.step(50)
        return bool(relay.held[run_id])

    wait_for(one_held, 10, "an entry held for the lite channel", every=0)
    held = [seq for seq, _ in relay.held[run_id]]
    relay.close()  # (SIGTERM to manage.py relay) before the batch is due
    lite.read_until(lambda: lite.seqs and lite.seqs[-1] == held[-1], "the held entries on the lite channel")
    assert lite.seqs[-len(held):] == held and _contiguous(lite.seqs)
    assert Cursor.parse(redis_client.get(cursor_key(run_id)).decode()).lite == held[-1]
    lite.close()


PACE_AT = 3  # the threshold in the adaptive test (OBS_LIVE_PACE_VIEWERS: 2,000)


def _lite_messages(sent: list[tuple[str, float, str]]) -> list[tuple[float, list[int]]]:
    """(when it began, the entry numbers it carries) of each lite message published."""
    return [(t, list(dict.fromkeys(f["seq"] for f in _frames(text)))) for channel, t, text in sent if channel == "lite"]


def _full_messages(sent: list[tuple[str, float, str]]) -> int:
    return sum(channel == "" for channel, _, _ in sent)  # one per entry


def test_the_lite_channel_is_paced_only_while_its_subscribers_are_at_the_threshold(relay, nchan, trainer, ingest,
                                                                                  run_id):
    relay.pace_viewers = PACE_AT
    open_channels(relay, ingest, trainer)
    viewers = [nchan.viewer(run_id, FROM_START, channel="lite") for _ in range(PACE_AT - 1)]
    sent = _record_publishes(relay)
    step = iter(range(100_000))

    def burst(n: int = 5) -> None:  # n entries between two reads: faster than any pace
        for _ in range(n):
            _entry(trainer, ingest, next(step))
        relay.step(50)

    for _ in range(4):  # below the threshold: one message per entry, at once
        burst()
    assert not relay.held[run_id] and relay.subscribers[run_id, "lite"] == PACE_AT - 1
    below = _lite_messages(sent)
    assert len(below) == _full_messages(sent) >= 20 and all(len(seqs) == 1 for _, seqs in below), below

    viewers.append(nchan.viewer(run_id, FROM_START, channel="lite"))  # the crowd reaches the threshold
    wait_for(lambda: burst(1) or relay.paced(run_id), 10, "nchan's count of lite subscribers at the threshold",
             every=0)
    assert relay.subscribers[run_id, "lite"] == PACE_AT  # as nchan's answer to the publish said
    start = len(sent)
    deadline = time.monotonic() + 6 * relay.pace_s
    while time.monotonic() < deadline:
        burst()
    paced = _lite_messages(sent[start:])
    assert any(len(seqs) > 1 for _, seqs in paced), paced  # several entries a message
    assert all(b - a >= relay.pace_s or len(seqs) == LITE_MAX_ENTRIES  # at most one per pace, unless more are held
               for (a, seqs), (b, _) in zip(paced, paced[1:])), paced  # than one message carries

    viewers.pop().close()  # back below the threshold: un-paced from the next publish on
    wait_for(lambda: burst(1) or not relay.paced(run_id), 10, "nchan's count of lite subscribers below the threshold",
             every=0)
    start = len(sent)
    for _ in range(4):
        burst()
    assert not relay.held[run_id]
    after = _lite_messages(sent[start:])
    assert len(after) == _full_messages(sent[start:]) >= 20 and all(len(seqs) == 1 for _, seqs in after), after

    upto, steps = relay.pos[run_id].full, next(step)
    assert relay.pos[run_id].lite == upto
    for v in viewers:  # every entry, in order, none twice, none missing, whatever the messages carried
        v.read_until(lambda v=v: v.seqs and v.seqs[-1] == upto, "every entry on the lite channel")
        assert _contiguous(v.seqs) and v.received[LOSS] == list(range(steps)), v.seqs
        v.close()
