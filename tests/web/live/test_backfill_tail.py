"""A resume's backfill with the live log's newest entries (webapp.live.backfill.with_unstored): a rewind in that tail
reaches the page and the points republished after it come from the rewind's step, not from the step the page held
(else the page keeps the superseded points, or loses the redone ones up to the step it held)."""

from webapp.live.backfill import with_unstored

LOSS = "train/loss"


def frame(steps, value):
    return {"type": "update", "series": {LOSS: {"steps": list(steps), "values": [value] * len(steps),
                                                "nonfinite": []}}}


def empty_body(rewinds=()):
    return {"series": {LOSS: {"steps": [], "values": [], "nonfinite": []}}, "rewinds": list(rewinds), "events": [],
            "truncated": []}


def test_a_rewind_only_in_the_tail_goes_to_the_page_with_the_points_redone_after_it():
    rw = {"from_step": 29, "to_step": 20}
    tail = [frame(range(25, 30), 3.0), {"type": "update", "series": {}, "rewinds": [rw]}, frame(range(21, 35), 2.0)]
    out = with_unstored(empty_body(), {LOSS: 29}, tail)
    assert out["rewinds"] == [rw]
    assert out["series"][LOSS]["steps"] == list(range(21, 35))
    assert out["series"][LOSS]["values"] == [2.0] * 14


def test_a_stored_rewind_whose_redone_points_are_not_stored_yet_takes_them_from_the_tail():
    rw = {"from_step": 29, "to_step": 20}
    tail = [{"type": "update", "series": {}, "rewinds": [rw]}, frame(range(21, 35), 2.0)]
    out = with_unstored(empty_body([rw]), {LOSS: 29}, tail)
    assert out["rewinds"] == [rw], "one rewind, not the stored one and the tail's"
    assert out["series"][LOSS]["steps"] == list(range(21, 35))


def test_without_a_rewind_only_the_points_past_the_held_step_are_added():
    out = with_unstored(empty_body(), {LOSS: 29}, [frame(range(25, 33), 1.0)])
    assert out["rewinds"] == [] and out["series"][LOSS]["steps"] == [30, 31, 32]


def test_a_rewinds_event_only_in_the_tail_goes_to_the_page_once_for_its_marker():
    """The page marks a rewind from its event: one the backfill's stored events do not hold yet comes from the tail
    (once, in id order, and only past the event the page holds)."""
    rw = {"from_step": 29, "to_step": 20}
    ev = {"id": 7, "kind": "rewind", "name": "", "step": 20, "payload": rw, "t": "2026-01-01T00:00:00Z"}
    older = dict(ev, id=5, kind="state", payload={})
    tail = [{"type": "update", "series": {}, "rewinds": [rw], "events": [older, ev]}, frame(range(21, 35), 2.0),
            {"type": "update", "series": {}, "events": [ev]}]
    out = with_unstored(empty_body(), {LOSS: 29}, tail, after_event=6)
    assert out["events"] == [ev]
    stored = with_unstored(dict(empty_body([rw]), events=[ev]), {LOSS: 29}, tail, after_event=6)
    assert stored["events"] == [ev], "an event both stored and in the tail goes once"
    assert with_unstored(empty_body(), {LOSS: 29}, tail)["events"] == [], "no event id held: no events, as stored"
