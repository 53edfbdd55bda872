"""The Monitor: routing by name, snapshot/restore that changes nothing, re-delivery without duplicates, rewind."""

from __future__ import annotations

import json
import math
import random

import pytest

from observatory import contract
from observatory.anomalies import AnomalyLog, Monitor

HIST = contract.router_metric(0, "routing_hist")


def stream(n: int = 1400, seed: int = 0) -> list[tuple[int, dict, float]]:
    """A run with a bit of everything: two loss spikes, a NaN step, a slowdown, a hot expert, a stall."""
    rnd = random.Random(seed)
    rows, t = [], 1000.0
    for s in range(n):
        loss = (2.0 + 8.5 * (1 + s / 20) ** -0.47) * (1 + rnd.uniform(-0.01, 0.01))
        if s in (600, 1200):
            loss *= 1.4
        tps = 12_000 * (1 + rnd.gauss(0, 0.01)) * (0.9 if 900 <= s < 1000 else 1.0)
        t += 2048 / tps + (120.0 if s == 1100 else 0.0)
        v = {contract.M_LOSS: loss, contract.domain_loss("web"): loss * 1.1, contract.M_GRAD_NORM: 0.5,
             contract.M_TOKENS_PER_S: tps, contract.M_STEP_TIME: 2048 / tps, "hw/cpu_percent": 50.0,
             contract.M_FINITE: 1.0}
        for e in range(4):
            v[f"{HIST}/{e}"] = 100.0 * math.exp(rnd.gauss(0, 0.1)) * (8 if e == 2 and 700 <= s < 800 else 1)
        if s == 400:
            v[contract.M_LOSS] = v[contract.M_GRAD_NORM] = math.nan
            v[contract.M_FINITE] = 0.0
        rows.append((s, v, t))
    return rows


def run(mon: Monitor, rows) -> list:
    events = []
    for step, values, t in rows:
        events += mon.tick(t, heartbeat_age_s=1.0)
        events += mon.observe(step, values, t)
    return events


@pytest.fixture(scope="module")
def whole():
    rows = stream()
    return rows, run(Monitor(), rows)


def test_the_stream_has_every_kind_it_was_built_with(whole):
    _, events = whole
    kinds = sorted({e.anomaly.kind for e in events if e.action == "opened"})
    assert kinds == ["hot_expert", "loss_spike", "nonfinite", "overflow", "stall", "step_time_rise",
                     "throughput_drop"]


@pytest.mark.parametrize("cut", [1, 401, 650, 750, 950, 1101])
def test_snapshot_and_restore_mid_stream_gives_exactly_the_same_events(whole, cut):
    rows, expected = whole
    first = Monitor()
    events = run(first, rows[:cut])
    blob = json.loads(json.dumps(first.snapshot(), allow_nan=False))  # through real JSON, strictly
    events += run(Monitor().restore(blob), rows[cut:])
    assert events == expected


def test_restoring_a_snapshot_then_re_delivering_steps_already_seen_duplicates_nothing(whole):
    rows, expected = whole
    mon = Monitor()
    head = run(mon, rows[:700])
    blob = json.dumps(mon.snapshot())
    # ingest restarts from the snapshot of step 699 and the stream re-delivers 690..699 (never acknowledged)
    tail = run(Monitor().restore(json.loads(blob)), rows[690:])
    assert head + tail == expected


def test_unwatched_names_cost_one_lookup_and_keep_no_state():
    mon = Monitor()
    # (hw/cpu_percent is read: it tells the step-time detectors whether other processes take the CPU)
    mon.observe(0, {"hw/load1": 5.0, "mixture/weight/web": 0.2, contract.M_LOSS: 3.0, f"{HIST}/0": 1.0})
    keys = sorted(mon.snapshot()["states"])
    assert keys == ["expert_load train/router/layer_0/routing_hist", "loss_spike train/loss"]


def test_open_anomalies_lists_what_is_in_progress():
    mon = Monitor()
    mon.observe(0, {contract.M_LOSS: 3.0})
    mon.observe(1, {contract.M_LOSS: 6.0, contract.M_GRAD_NORM: math.inf})
    assert sorted(a.kind for a in mon.open_anomalies()) == ["loss_spike", "nonfinite"]
    restored = Monitor().restore(json.loads(json.dumps(mon.snapshot())))
    assert restored.open_anomalies() == mon.open_anomalies()


def test_a_rewind_supersedes_what_began_after_it_and_keeps_what_began_before():
    rows = stream()
    mon, log = Monitor(), AnomalyLog()
    log.apply(run(mon, rows[:1300]))
    before = {a.key for a in log.anomalies()}
    mon = Monitor().restore(json.loads(json.dumps(mon.snapshot())))  # a restarted ingest knows as much
    superseded = mon.rewind(1050)
    assert {e.action for e in superseded} == {"superseded"}
    gone = {e.anomaly.key for e in superseded}
    assert gone == {k for k in before if int(k.rsplit(" ", 1)[1]) > 1050}
    assert {e.anomaly.kind for e in superseded} == {"loss_spike", "stall"}  # the spike at 1200, the stall
    log.apply(superseded)
    # the resumed branch: steps 1051.. again, this time with a spike at 1150 and none at 1200
    branch = stream(seed=1)[1051:1300]
    branch = [(s, {**v, contract.M_LOSS: rows[s][1][contract.M_LOSS] / (1.4 if s == 1200 else 1)
                   * (1.5 if s == 1150 else 1)}, t + 500) for s, v, t in branch]
    events = run(mon, branch)
    new = [e.anomaly for e in events if e.action == "opened" and e.anomaly.metric == contract.M_LOSS]
    assert [(a.kind, a.start_step) for a in new] == [("loss_spike", 1150)]


def test_a_rewind_into_an_open_episode_keeps_it_open():
    mon = Monitor()
    for s in range(30):
        mon.observe(s, {contract.M_FINITE: 1.0 if s < 20 else 0.0})
    assert mon.rewind(25) == []
    [a] = mon.open_anomalies()
    assert (a.kind, a.start_step, a.end_step) == ("overflow", 20, None)
    [e] = mon.observe(26, {contract.M_FINITE: 1.0})
    assert (e.action, e.anomaly.end_step) == ("closed", 26)


def test_a_snapshot_of_another_version_is_refused():
    with pytest.raises(ValueError, match="version"):
        Monitor().restore({"v": 99})
