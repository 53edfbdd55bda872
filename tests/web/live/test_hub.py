"""The per-process fan-out hub: one encoding per variant shared by every socket, coalesced batches in order, slow
sockets cut loose, and a hole in the live log's sequence sending every socket back through resume."""

import asyncio
import json

from webapp.live import hub as hubmod
from webapp.live import protocol


class FakeHub(hubmod.Hub):
    def __init__(self, interval=0.0):
        self.layer, self.feeds, self.sockets, self.keys = None, {}, 0, {}
        self._interval = interval

    def interval(self):
        return self._interval


def _update(step, **series):
    return {"type": "live.update", "payload": {
        "series": {n: {"steps": [step], "values": [v], "nonfinite": []} for n, v in series.items()},
        "rewinds": [], "events": []}}


async def _boxes(feed, subs):
    sent = [[] for _ in subs]
    closed = []
    boxes = []
    for i, sub in enumerate(subs):
        async def send(msg, i=i):
            sent[i].append(msg["text"])
        box = hubmod.Outbox(send, lambda code, why, i=i: closed.append((i, code)))
        box.sub = sub
        feed.outboxes.add(box)
        boxes.append(box)
    return boxes, sent, closed


async def _settle():
    for _ in range(5):
        await asyncio.sleep(0)


async def test_each_variant_is_encoded_once_and_shared_by_its_sockets():
    feed = hubmod.Feed(FakeHub(), "r1")
    loss = frozenset({"loss"})
    boxes, sent, _ = await _boxes(feed, [loss, loss, None])
    feed.receive(_update(1, loss=1.0, lr=0.1))
    await _settle()
    assert sent[0][0] is sent[1][0]  # the same str object: encoded once for both sockets
    assert json.loads(sent[0][0])["series"] == {"loss": {"steps": [1], "values": [1.0], "nonfinite": []}}
    assert set(json.loads(sent[2][0])["series"]) == {"loss", "lr"}
    for b in boxes:
        b.stop()


async def test_updates_between_two_sends_travel_as_one_ordered_batch():
    feed = hubmod.Feed(FakeHub(interval=3600), "r1")
    boxes, sent, _ = await _boxes(feed, [None])
    feed.receive(_update(1, loss=1.0))  # the first goes at once
    feed.receive(_update(2, loss=2.0))
    feed.receive(_update(3, loss=3.0))
    await _settle()
    assert len(sent[0]) == 1
    feed.flush()  # the interval elapsed
    await _settle()
    batch = json.loads(sent[0][1])
    assert [f["series"]["loss"]["steps"] for f in batch] == [[2], [3]]
    feed.timer.cancel() if feed.timer else None
    boxes[0].stop()


async def test_the_frames_of_one_message_go_out_in_one_batch_when_the_send_is_due_at_once():
    """Points and the anomaly frame about them come in one message (push.LivePublisher.send): one batch, in order
    (two messages were two sends, the second held back a whole interval)."""
    feed = hubmod.Feed(FakeHub(interval=3600), "r1")
    boxes, sent, _ = await _boxes(feed, [frozenset({"loss"})])
    msg = _update(1, loss=1.0)
    msg["more"] = [{"type": "anomaly", "run_id": "r1", "anomalies": [{"metric": "loss", "event": "opened"}]}]
    feed.receive(msg)
    await _settle()
    (text,) = sent[0]
    assert [f["type"] for f in json.loads(text)] == ["update", "anomaly"]
    boxes[0].stop()


async def test_a_socket_that_does_not_read_is_closed_with_4008_not_buffered_forever():
    feed = hubmod.Feed(FakeHub(), "r1")
    blocked = asyncio.Event()

    async def never(msg):
        await blocked.wait()
    closed = []
    box = hubmod.Outbox(never, lambda code, why: closed.append(code))
    feed.outboxes.add(box)
    for step in range(protocol.MAX_PENDING_FRAMES + 3):
        feed.receive(_update(step, loss=1.0))
        await asyncio.sleep(0)
    assert closed == [protocol.CLOSE_TOO_SLOW]
    box.stop()


async def test_a_hole_in_the_sequence_makes_every_socket_resume():
    feed = hubmod.Feed(FakeHub(), "r1")
    boxes, sent, closed = await _boxes(feed, [None, frozenset({"loss"})])
    feed.receive({**_update(1, loss=1.0), "seq": 1})
    feed.receive({**_update(2, loss=1.0), "seq": 2})
    feed.receive({**_update(4, loss=1.0), "seq": 4})  # 3 was trimmed from the log before it was read
    await _settle()
    assert sorted(closed) == [(0, protocol.CLOSE_RESYNC), (1, protocol.CLOSE_RESYNC)]
    assert not any('"steps":[4]' in t for s in sent for t in s)  # nothing after the hole goes out first
    for b in boxes:
        b.stop()


async def test_feature_frames_pass_unfiltered_and_updates_without_subscribed_series_are_skipped():
    feed = hubmod.Feed(FakeHub(), "r1")
    boxes, sent, _ = await _boxes(feed, [frozenset({"loss"})])
    feed.receive(_update(1, lr=0.1))  # nothing this socket subscribed to
    feed.receive({"type": "live.update", "payload": {"type": "anomaly", "anomaly": {"id": 1}}})
    await _settle()
    assert [json.loads(t)["type"] for t in sent[0]] == ["anomaly"]
    feed.receive({**_update(2, lr=0.2), "seq": 9})  # a frame of the log: its number goes, without its series
    await _settle()
    assert json.loads(sent[0][-1]) == {"type": "update", "run_id": "r1", "seq": 9}
    boxes[0].stop()


def test_the_interval_grows_with_the_sockets_of_a_process():
    h = FakeHub()
    h.sockets = 10
    assert hubmod.Hub.interval(h) == hubmod.MIN_INTERVAL_S
    h.sockets = int(hubmod.FRAME_BUDGET * 0.5)
    assert hubmod.Hub.interval(h) == 0.5


async def test_identical_backfills_arriving_together_share_a_read_but_never_a_stale_one():
    from webapp.live.coalesce import Coalescer

    co, reads, gate = Coalescer(), [], asyncio.Event()

    async def read():
        reads.append(len(reads))
        await gate.wait()
        return f"answer {len(reads)}"
    first = asyncio.create_task(co.get("k", read))
    await _settle()  # the first read is running: later arrivals must not take its (older) answer
    later = [asyncio.create_task(co.get("k", read)) for _ in range(3)]
    await _settle()
    gate.set()
    assert await first == "answer 1"
    assert [await t for t in later] == ["answer 2"] * 3  # one more read for all three
    assert len(reads) == 2


async def test_the_log_has_one_order_whoever_appended_and_a_restarted_log_makes_every_socket_resume():
    """Every writer (ingest A, ingest B after a takeover, a Celery task's push_now, an annotation) appends to the
    same live log, so one sequence covers them all: consecutive numbers pass whoever wrote them, with the number on
    every frame; a number going back (the log re-created after Redis lost it) sends every socket through resume."""
    feed = hubmod.Feed(FakeHub(), "r1")
    boxes, sent, closed = await _boxes(feed, [None])
    feed.receive({**_update(1, loss=1.0), "seq": 41})
    feed.receive({**_update(2, loss=1.0), "seq": 42})
    feed.receive({"payload": {"type": "annotation", "event": "remove", "id": 3}, "seq": 43})
    await _settle()
    assert closed == []
    frames = [f for t in sent[0] for f in (json.loads(t) if t.startswith("[") else [json.loads(t)])]
    assert [f["seq"] for f in frames] == [41, 42, 43]
    feed.receive({**_update(5, loss=1.0), "seq": 7})
    await _settle()
    assert closed == [(0, protocol.CLOSE_RESYNC)]
    assert not any('"steps":[5]' in t for t in sent[0])
    for b in boxes:
        b.stop()
