"""Detectors on coarse logs (a point every k steps, or only a few points): a climb over a few logged points, a
grad-norm explosion before the level is known, a loss scale that halves several times between two points.

The numbers are those of public incident logs (bench/data/anomalies/README.md, "Public incident logs")."""

from __future__ import annotations

import json
import math
import random

from observatory import contract
from observatory.anomalies import M_LOSS_SCALE, Monitor
from tests.observatory.anomaly_feed import feed, opened

# BLOOM tr8-104B, experiment 2 (bigscience train/tr8-104B-wide/chronicles.md lines 93-97): logged every 10 steps
DIVERGING = [(6900, 6.365808), (6910, 6.598378), (6920, 7.314456), (6930, 9.121927), (6940, 10.23865)]


def test_the_diverging_coarse_log_has_every_point_under_the_25_percent_rule():
    assert all(b / a < 1.25 for (_, a), (_, b) in zip(DIVERGING, DIVERGING[1:]))


def test_a_loss_diverging_over_40_steps_logged_every_10_is_found_at_its_third_rise():
    events = feed(Monitor(), [(s, {contract.M_LOSS: x}) for s, x in DIVERGING])
    [e] = opened(events)
    a = e.anomaly
    # it began with the first rising point; found at the third rise in a row (2 logged points later)
    assert (a.kind, a.start_step, e.at) == ("loss_spike", 6910, 6930)
    assert a.severity in ("warning", "critical") and "6.366" in a.explanation and "step 6900" in a.explanation
    final = [x.anomaly for x in events if x.anomaly.key == a.key][-1]
    assert final.peak_step == 6940 and final.severity == "critical" and final.score > 1.6


def test_the_same_climb_after_a_long_clean_coarse_history_is_found_no_later():
    rnd = random.Random(3)
    rows = [(s, 6.3 * (1 + 30 / (s + 100)) * (1 + rnd.uniform(-0.01, 0.01))) for s in range(0, 6900, 10)]
    base = rows[-1][1] / DIVERGING[0][1]
    rows += [(s, x * base) for s, x in DIVERGING]
    events = feed(Monitor(), [(s, {contract.M_LOSS: x}) for s, x in rows])
    [e] = opened(events)
    assert e.anomaly.kind == "loss_spike" and 6910 <= e.anomaly.start_step <= e.at <= 6930


def test_three_small_rises_in_a_row_on_a_noisy_coarse_curve_raise_nothing():
    rnd = random.Random(5)
    rows, x = [], 8.0
    for s in range(0, 40_000, 10):
        x = max(2.0, x * 0.9995)
        rows.append((s, {contract.M_LOSS: x * math.exp(rnd.gauss(0, 0.03))}))
    assert feed(Monitor(), rows) == []
    # a run of rises that adds up to 15% is noise-sized for a series this noisy: still nothing
    quiet = [(s, {contract.M_LOSS: v}) for s, v in [(0, 4.0), (10, 4.2), (20, 4.4), (30, 4.6)]]
    assert feed(Monitor(), quiet) == []


def test_a_grad_norm_exploding_in_a_few_logged_points_is_found_before_the_loss_spike():
    # BLOOM tr11-176B (train/tr11-176B-ml/chronicles.md lines 45, 202-210): the only points the chronicle logs
    rows = [(12695, 2.463556, 0.174), (31214, 2.198845, 0.242), (31215, 2.220424, 0.947), (31216, 2.595213, 2.390),
            (31217, 2.241558, 15.886), (31218, 2.345279, 145.119), (31219, 5.098124, 960.351)]
    events = feed(Monitor(), [(s, {contract.M_LOSS: l, contract.M_GRAD_NORM: g}) for s, l, g in rows])
    [g] = opened(events, "grad_norm_spike")
    [loss] = opened(events, "loss_spike")
    assert g.at == 31216 and g.anomaly.severity == "critical" and "0.174" in g.anomaly.explanation
    assert loss.at == 31219 and g.at < loss.at


def test_grad_norms_falling_through_warmup_on_a_coarse_log_raise_nothing():
    rows = [(s, {contract.M_GRAD_NORM: 15.0 * (1 + s / 20) ** -1.2 * (1.3 if s % 30 == 0 else 1.0)})
            for s in range(0, 3000, 10)]
    assert feed(Monitor(), rows) == []


def test_a_loss_scale_falling_8x_between_two_logged_points_counts_three_halvings():
    # BLOOM tr1-13B (train/tr1-13B-base/chronicles.md lines 162-168): 65536 -> 8192 between two logged points
    scales = [(29020, 32768.0), (29030, 32768.0), (29040, 65536.0), (29050, 8192.0), (29060, 4096.0)]
    events = feed(Monitor(), [(s, {M_LOSS_SCALE: x}) for s, x in scales])
    [e] = opened(events, "overflow")
    assert e.at == 29050 and e.anomaly.start_step == 29050 and "3 times" in e.anomaly.explanation


def test_isolated_halvings_a_thousand_steps_apart_on_a_coarse_log_raise_nothing():
    scale, rows = 2.0 ** 16, []
    for s in range(0, 20_000, 100):
        if s % 1000 == 500:
            scale /= 2
        rows.append((s, {M_LOSS_SCALE: scale}))
    assert feed(Monitor(), rows) == []


def test_a_rise_in_progress_survives_a_snapshot_and_a_rewind_forgets_it():
    rows = [(s, {contract.M_LOSS: x}) for s, x in DIVERGING]
    whole = feed(Monitor(), rows)
    first = Monitor()
    before = feed(first, rows[:3])  # two rises counted, nothing open yet
    assert before == []
    second = Monitor().restore(json.loads(json.dumps(first.snapshot(), allow_nan=False)))
    assert feed(second, rows[3:]) == whole
    third = Monitor().restore(json.loads(json.dumps(first.snapshot(), allow_nan=False)))
    third.rewind(6905)  # the rises from 6910 on never happened; a fall follows, then one rise: nothing
    assert feed(third, [(6910, {contract.M_LOSS: 6.2}), (6920, {contract.M_LOSS: 6.9})]) == []


def test_a_snapshot_taken_before_the_coarse_rules_existed_still_restores_and_runs():
    from observatory.anomalies.routing import Config
    from dataclasses import replace

    for template, values in ((Config().grad, [0.2, 0.25, 3.0]), (Config().loss, [6.37, 6.60, 7.31, 9.12]),
                             (Config().loss_scale, [65536.0, 8192.0])):
        det = replace(template, metric="m")
        st = det.init()
        st, _ = det.update(st, 0, values[0])
        for key in ("rise", "lo", "pts"):  # what an older snapshot lacks
            st.pop(key, None)
        for s, x in enumerate(values[1:], start=1):
            st, _ = det.update(st, s * 10, x)
        assert json.loads(json.dumps(st, allow_nan=False)) == st


def test_the_public_log_of_that_divergence_is_found_at_the_same_logged_point():
    from pathlib import Path

    from observatory.anomalies.scan import scan_file

    path = Path(__file__).resolve().parents[2] / "bench/data/anomalies/public/tr8-104B-exp2.csv"
    [(_, a)] = [(r, a) for r, a in scan_file(str(path)) if a.kind == "loss_spike"]
    assert (a.start_step, a.peak_step, a.severity) == (6910, 6940, "critical")
