"""The run's live log (webapp.live.livelog) on real Redis: one order and consecutive numbers whoever appends, a
bounded window, a log re-created after Redis lost it still increasing, and what a resume reads."""

from __future__ import annotations

import json
import threading

import pytest

from webapp.live import livelog
from webapp.live.lite import Cursor


def test_appends_from_many_writers_get_consecutive_numbers_in_one_order(redis_client, run_id):
    log = livelog.LiveLog(redis_client)

    def writer(name):
        for i in range(50):
            log.append(run_id, [{"type": "update", "run_id": run_id, "who": name, "i": i}])
    threads = [threading.Thread(target=writer, args=(n,)) for n in ("ingest", "web", "celery")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    entries = redis_client.xrange(livelog.log_key(run_id))
    seqs = [livelog.seq_of(e) for e, _ in entries]
    assert seqs == list(range(seqs[0], seqs[0] + 150))
    for who in ("ingest", "web", "celery"):  # each writer's own order kept
        mine = [json.loads(f[b"f"])[0]["i"] for _, f in entries if json.loads(f[b"f"])[0]["who"] == who]
        assert mine == list(range(50))
    assert redis_client.zscore(livelog.RUNS_KEY, run_id) is not None  # in the relays' read set


def test_the_window_is_bounded_and_a_resume_past_it_is_a_gap(redis_client, run_id):
    log = livelog.LiveLog(redis_client, window=10)
    seqs = [log.append(run_id, [{"type": "anomaly", "i": i}]) for i in range(25)]
    assert redis_client.xlen(livelog.log_key(run_id)) == 10
    gap, entries = livelog.since(redis_client, run_id, seqs[20])
    assert not gap and [livelog.seq_of(e) for e, _ in entries] == seqs[21:]
    gap, entries = livelog.since(redis_client, run_id, seqs[5])  # 6..14 trimmed: the reader must refetch
    assert gap and livelog.seq_of(entries[0][0]) == seqs[15]
    seq, _t, frames = livelog.decode_entry(run_id, *entries[0])
    assert frames == [{"type": "anomaly", "i": 15, "run_id": run_id, "seq": seq}]


def test_a_log_redis_lost_starts_again_above_every_number_it_gave(redis_client, run_id):
    log = livelog.LiveLog(redis_client)
    last = [log.append(run_id, [{"type": "x"}]) for _ in range(3)][-1]
    redis_client.delete(livelog.log_key(run_id))
    assert log.append(run_id, [{"type": "x"}]) > last


def test_an_empty_entry_is_refused(redis_client, run_id):
    with pytest.raises(ValueError, match="at least one frame"):
        livelog.LiveLog(redis_client).append(run_id, [])


def test_a_heartbeat_between_two_steps_rides_in_the_next_steps_entry():
    """At most one entry (one message per viewer) per step: changes that are only the run's summary wait up to
    SUMMARY_HOLD_S for the next step's points, and go alone only when none come."""
    from webapp.live.push import LiveBuffer
    from webapp.metrics.changes import RunChanges

    sent = []
    buf = LiveBuffer(lambda run, *bodies: sent.append((run, bodies)), interval=0.1, summary_hold=1.0)
    buf.add({"r": RunChanges(run={"last_step": 1})})
    t = buf.since["r"]
    assert buf.flush_due(now=t + 0.5) == 0 and sent == []  # a heartbeat alone: held
    points = RunChanges(run={"last_step": 2})
    points.add_point("loss", 2, 0.5, 0)
    buf.add({"r": points})
    assert buf.flush_due(now=t + 0.6) == 1
    assert len(sent) == 1 and sent[0][1][0]["series"]["loss"]["steps"] == [2]
    buf.add({"r": RunChanges(run={"last_step": 2})})
    assert buf.next_due_in(now=buf.since["r"]) == 1.0
    assert buf.flush_due(now=buf.since["r"] + 1.0) == 1 and sent[-1][1][0]["run"] == {"last_step": 2}


def test_the_trim_keeps_what_the_relays_have_not_published_up_to_a_cap(redis_client, run_id, monkeypatch):
    """The relays count as a reader: entries after their cursor stay past the window (an outage of the push tier
    loses nothing up to RELAY_HOLD_MAX); past that cap the oldest go (the relay sends a gap frame)."""
    monkeypatch.setattr(livelog, "RELAY_HOLD_MAX", 30)
    log = livelog.LiveLog(redis_client, window=10)
    first = log.append(run_id, [{"type": "x"}])
    redis_client.set(livelog.relay_cursor_key(run_id), f"{first} - -")  # the relays published the first only
    for _ in range(24):
        log.append(run_id, [{"type": "x"}])
    assert redis_client.xlen(livelog.log_key(run_id)) == 24  # 25 appended, all but the published one kept
    for _ in range(20):
        log.append(run_id, [{"type": "x"}])
    assert redis_client.xlen(livelog.log_key(run_id)) == 30  # the cap
    redis_client.delete(livelog.relay_cursor_key(run_id))  # no relay (no push tier): the window alone
    log.append(run_id, [{"type": "x"}])
    assert redis_client.xlen(livelog.log_key(run_id)) == 10


def test_the_trim_counts_the_lite_channels_position_where_it_lags(redis_client, run_id):
    """The relays' cursor names each channel's position (webapp.live.lite.Cursor): the paced lite channel lags the
    full one, and the trim keeps what follows the lower of the two."""
    log = livelog.LiveLog(redis_client, window=10)
    first = log.append(run_id, [{"type": "x"}])
    cursor = livelog.relay_cursor_key(run_id)
    redis_client.set(cursor, str(Cursor(full=first + 15, full_id="1:0", lite_id="1:0", lite=first)))  # lite lags
    for _ in range(20):
        last = log.append(run_id, [{"type": "x"}])
    assert redis_client.xlen(livelog.log_key(run_id)) == 20  # 21 appended, all but the first kept for lite
    redis_client.set(cursor, str(Cursor(full=last, full_id="1:0", lite_id="1:0", lite=last, pending=last)))
    log.append(run_id, [{"type": "x"}])
    assert redis_client.xlen(livelog.log_key(run_id)) == 10  # both channels up to date: the window
