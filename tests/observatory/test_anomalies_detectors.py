"""Each anomaly detector fires on its event and stays quiet on clean, real-shaped curves."""

from __future__ import annotations

import copy
import json
import math
import random

from observatory import contract
from observatory.anomalies import M_LOSS_SCALE, Monitor
from observatory.anomalies.detectors import ShiftDetector, SpikeDetector
from observatory.anomalies.moe import ExpertLoadDetector
from observatory.anomalies.stall import StallDetector
from tests.observatory.anomaly_feed import feed
from tests.observatory.anomaly_feed import opened as opened_events

LOSS_NAMES = (contract.M_LOSS, contract.M_CE, contract.domain_loss("code"), contract.M_EVAL_LOSS)


def falling(n: int, seed: int = 0, noise: float = 0.01) -> list[float]:
    """Early training: 10.5 -> ~3 over n steps (a power law), with ±noise relative jitter."""
    rnd = random.Random(seed)
    return [(2.0 + 8.5 * (1 + s / 20) ** -0.47) * (1 + rnd.uniform(-noise, noise)) for s in range(n)]


def opened(events, kind=None) -> list:
    return [e.anomaly for e in opened_events(events, kind)]


# ---------------------------------------------------------------------------------------------- losses
def test_a_loss_25_percent_above_the_previous_value_is_a_spike_with_one_earlier_point():
    for name in LOSS_NAMES:
        mon = Monitor()
        events = feed(mon, [(0, {name: 3.0}), (10, {name: 3.9})])
        [a] = opened(events)
        # a per-domain loss is noisy (a few sequences a batch): its single-point spikes are logged as info
        sev = "info" if name == contract.domain_loss("code") else "warning"
        assert (a.kind, a.metric, a.start_step, a.severity) == ("loss_spike", name, 10, sev)
        assert a.score == 1.3 and "previous value (step 0)" in a.explanation and "3.9" in a.explanation


def test_a_rise_under_25_percent_at_cold_start_is_not_a_spike():
    assert feed(Monitor(), [(0, {contract.M_LOSS: 3.0}), (1, {contract.M_LOSS: 3.6})]) == []


def test_a_smoothly_falling_noisy_curve_raises_nothing():
    curve = falling(2000)
    assert curve[0] > 10 and curve[-1] < 3.2
    rows = [(s, {name: x * (1 + 0.002 * i) for i, name in enumerate(LOSS_NAMES)}) for s, x in enumerate(curve)]
    assert feed(Monitor(), rows) == []


def test_sparse_logging_every_10th_step_finds_a_spike_and_nothing_else():
    curve = falling(3000, seed=3)
    curve[1500] *= 1.3
    events = feed(Monitor(), [(s, {contract.M_LOSS: curve[s]}) for s in range(0, 3000, 10)])
    [a] = opened(events)
    assert (a.kind, a.start_step) == ("loss_spike", 1500)
    closed = [e.anomaly for e in events if e.action == "closed"]
    assert [c.end_step for c in closed] == [1510]


def test_a_spike_of_12_percent_over_the_running_level_is_found():
    curve = falling(1500, seed=4)
    curve[1200] *= 1.12
    [a] = opened(feed(Monitor(), [(s, {contract.M_LOSS: x}) for s, x in enumerate(curve)]))
    assert a.start_step == 1200 and "running level" in a.explanation and 1.08 < a.score < 1.16


def test_a_divergence_that_climbs_for_tens_of_steps_is_found_early():
    curve = falling(1500, seed=5)
    for k in range(40):
        curve[1000 + k] *= 1 + 0.02 * k + 0.002 * k * k
    events = feed(Monitor(), [(s, {contract.M_LOSS: x}) for s, x in enumerate(curve)])
    [a] = opened(events)
    assert 1000 <= a.start_step <= 1015
    final = events[-1].anomaly  # updated as it climbs, closed when the loss is back
    assert (events[-1].action, final.start_step, final.peak_step, final.end_step, final.severity) == (
        "closed", a.start_step, 1039, 1040, "critical")


def test_the_level_freezes_during_a_spike_and_the_episode_reports_its_peak():
    curve = falling(800, seed=6)
    for s, f in ((600, 1.3), (601, 1.6), (602, 1.4)):
        curve[s] *= f
    events = feed(Monitor(), [(s, {contract.M_LOSS: x}) for s, x in enumerate(curve)])
    assert [e.action for e in events] == ["opened", "updated", "closed"]
    final = events[-1].anomaly
    assert (final.start_step, final.peak_step, final.end_step, final.severity) == (600, 601, 603, "critical")


# ---------------------------------------------------------------------------------------------- norms
def _norms(n: int, seed: int = 0) -> list[dict]:
    rnd = random.Random(seed)
    return [{contract.M_GRAD_NORM: (0.3 + 1.5 * math.exp(-s / 80)) * math.exp(rnd.gauss(0, 0.15)),
             contract.M_UPDATE_NORM: 0.8 * min(1.0, (s + 1) / 30) * (1 + rnd.gauss(0, 0.05))} for s in range(n)]


def test_clean_grad_and_update_norms_through_lr_warmup_raise_nothing():
    assert feed(Monitor(), enumerate(_norms(2500))) == []


def test_grad_norm_and_update_norm_spikes_are_found():
    rows = _norms(1200, seed=1)
    rows[700][contract.M_GRAD_NORM] *= 6
    rows[900][contract.M_UPDATE_NORM] *= 4
    found = {(a.kind, a.start_step) for a in opened(feed(Monitor(), enumerate(rows)))}
    assert found == {("grad_norm_spike", 700), ("update_norm_spike", 900)}


def test_a_grad_norm_above_4_for_many_steps_at_a_long_horizon_is_found():
    rows = _norms(1500, seed=2)
    for s in range(1000, 1100):
        rows[s][contract.M_GRAD_NORM] = 4.6
    events = feed(Monitor(), enumerate(rows))
    high = opened(events, "grad_norm_high")
    assert [(a.start_step, a.severity) for a in high] == [(1000, "warning")]
    assert [e.anomaly.end_step for e in events if e.action == "closed" and e.anomaly.kind == "grad_norm_high"] == [1100]


# ---------------------------------------------------------------------------------------------- non-finite, overflow
def test_a_nan_step_is_one_critical_anomaly_naming_the_loss_that_closes_when_values_are_finite():
    names = [contract.M_GRAD_NORM, contract.grad_norm("layer_0/w"), contract.M_LOSS, contract.M_UPDATE_NORM]
    rows = [(s, {n: 1.0 + 0.01 * (s % 3) for n in names}) for s in range(20)]
    rows[10][1].update({n: math.nan for n in names})
    rows[11][1][contract.M_LOSS] = math.inf
    events = feed(Monitor(), rows)
    assert [e.action for e in events] == ["opened", "closed"]
    a = events[-1].anomaly
    assert (a.kind, a.metric, a.severity, a.start_step, a.end_step, a.score) == (
        "nonfinite", contract.M_LOSS, "critical", 10, 12, 4.0)
    assert a.explanation.startswith("train/loss is NaN at step 10 (and 3 more:")


def test_a_hardware_reading_going_non_finite_is_its_own_episode():
    rows = [(s, {contract.M_LOSS: 3.0, "hw/gpu0/temp": 60.0}) for s in range(5)]
    rows[2][1]["hw/gpu0/temp"] = math.nan
    rows[2][1][contract.M_LOSS] = math.nan
    metrics = sorted(a.metric for a in opened(feed(Monitor(), rows), "nonfinite"))
    assert metrics == ["hw/gpu0/temp", contract.M_LOSS]


def test_skipped_steps_and_a_collapsing_loss_scale_are_overflows():
    rows = [(s, {contract.M_FINITE: 1.0, M_LOSS_SCALE: 2.0 ** 16}) for s in range(300)]
    for s in (100, 101, 102):
        rows[s][1][contract.M_FINITE] = 0.0
    for s in range(200, 300):
        rows[s][1][M_LOSS_SCALE] = 2.0 ** (16 - min(4, (s - 200) // 5 + 1))
    events = feed(Monitor(), rows)
    by_metric = {e.anomaly.metric: e.anomaly for e in events}
    skipped, scale = by_metric[contract.M_FINITE], by_metric[M_LOSS_SCALE]
    assert (skipped.start_step, skipped.end_step, skipped.severity, skipped.score) == (100, 103, "critical", 3.0)
    assert (scale.kind, scale.start_step, scale.end_step) == ("overflow", 200, None)


def test_isolated_loss_scale_halvings_of_normal_fp16_training_raise_nothing():
    rows, scale = [], 2.0 ** 16
    for s in range(5000):
        if s % 700 == 699:
            scale /= 2
        rows.append((s, {M_LOSS_SCALE: scale}))
    assert feed(Monitor(), rows) == []


# ---------------------------------------------------------------------------------------------- throughput
def _speed(n: int, seed: int = 0, drop_at: int | None = None, drop: float = 0.0) -> list[dict]:
    rnd = random.Random(seed)
    out = []
    for s in range(n):
        tps = 12_600 * (1 + rnd.gauss(0, 0.015)) * (0.05 if s < 2 else 0.4 if s % 100 == 99 else 1.0)
        if drop_at is not None and s >= drop_at:
            tps *= 1 - drop
        out.append({contract.M_TOKENS_PER_S: tps, contract.M_MFU: tps * 3e-6, contract.M_STEP_TIME: 2048 / tps})
    return out


def test_checkpoint_blips_and_compilation_are_not_slowdowns():
    assert feed(Monitor(), enumerate(_speed(2500))) == []


def test_a_sustained_throughput_drop_of_6_percent_is_found_on_all_three_series():
    events = feed(Monitor(), enumerate(_speed(1500, seed=1, drop_at=1000, drop=0.06)))
    found = {(a.kind, a.metric) for a in opened(events)}
    assert found == {("throughput_drop", contract.M_TOKENS_PER_S), ("throughput_drop", contract.M_MFU),
                     ("step_time_rise", contract.M_STEP_TIME)}
    assert all(998 <= a.start_step <= 1003 and a.start_step <= a.peak_step for a in opened(events))


def test_shift_detector_scores_a_zero_baseline_finitely():
    det = ShiftDetector(kind="drop_surge", metric=contract.M_DROP, direction=1, rel=0.5, abs_min=0.02,
                        sustain=3, win=3)
    st, events = det.init(), []
    for s in range(60):
        st, ev = det.update(st, s, 0.0 if s < 40 else 0.2)
        events += ev
    [e] = events
    assert math.isfinite(e.anomaly.score) and json.loads(json.dumps(st)) == st


# ---------------------------------------------------------------------------------------------- stall
def test_no_step_for_k_median_intervals_while_the_heartbeat_lives_is_a_stall():
    det = StallDetector(k=10, min_s=5)
    st = det.init()
    for s in range(20):
        st, _ = det.update(st, s, 100.0 + s)
    st, ev = det.update_time(st, 125.0, heartbeat_age_s=1.0, phase="training")  # idle 6 s < 10 × 1 s
    assert ev == []
    st, ev = det.update_time(st, 131.0, heartbeat_age_s=1.0, phase="training")
    [e] = ev
    assert (e.action, e.anomaly.kind, e.anomaly.start_step, e.anomaly.severity) == ("opened", "stall", 19, "warning")
    st, ev = det.update_time(st, 150.0, heartbeat_age_s=1.0, phase="training")  # 31 s: 3× the threshold
    assert [(e.action, e.anomaly.severity) for e in ev] == [("updated", "critical")]
    st, ev = det.update(st, 20, 151.0)
    assert [(e.action, e.anomaly.end_step) for e in ev] == [("closed", 20)]


def test_a_paused_run_does_not_stall_and_a_lost_heartbeat_is_its_own_anomaly():
    det = StallDetector(k=10, min_s=5)
    st = det.init()
    for s in range(10):
        st, _ = det.update(st, s, float(s))
    st, ev = det.update_time(st, 500.0, since_step_s=491.0, heartbeat_age_s=1.0, phase="paused")
    assert ev == []
    st, ev = det.update_time(st, 600.0, heartbeat_age_s=math.inf)
    assert [(e.action, e.anomaly.kind, e.anomaly.severity) for e in ev] == [("opened", "heartbeat_lost", "critical")]
    assert json.loads(json.dumps(st)) == st  # an endless age is stored as a finite number
    st, ev = det.update_time(st, 610.0, heartbeat_age_s=2.0, phase="paused")
    assert [(e.action, e.anomaly.kind) for e in ev] == [("closed", "heartbeat_lost")]


# ---------------------------------------------------------------------------------------------- MoE
def _moe(n: int, seed: int = 0, layers: int = 2, experts: int = 8) -> list[dict]:
    rnd = random.Random(seed)
    rows = []
    for s in range(n):
        v = {contract.M_DROP: max(0.0, (0.05 + 0.2 * math.exp(-s / 300)) * (1 + rnd.gauss(0, 0.1)))}
        for layer in range(layers):
            for e in range(experts):
                v[f"{contract.router_metric(layer, 'routing_hist')}/{e}"] = 512 * math.exp(rnd.gauss(0, 0.1))
                v[f"{contract.router_metric(layer, 'router_bias')}/{e}"] = (
                    0.3 * math.sin(e + layer) * (1 - math.exp(-s / 150)) + rnd.gauss(0, 0.003))
        rows.append(v)
    return rows


def test_clean_moe_routing_raises_nothing():
    assert feed(Monitor(), enumerate(_moe(1500))) == []


def test_hot_and_dead_experts_drop_surges_and_a_runaway_bias_are_found():
    rows = _moe(1500, seed=1)
    hist1, bias0 = contract.router_metric(1, "routing_hist"), contract.router_metric(0, "router_bias")
    for s in range(600, 800):
        rows[s][f"{hist1}/3"] *= 6
        rows[s][f"{hist1}/5"] *= 0.01
    for s in range(900, 960):
        rows[s][contract.M_DROP] *= 4
    for s in range(700, 1500):
        rows[s][f"{bias0}/2"] += 0.002 * (s - 700)
    found = {(a.kind, a.metric) for a in opened(feed(Monitor(), enumerate(rows)))}
    assert found == {("hot_expert", f"{hist1}/3"), ("dead_expert", f"{hist1}/5"),
                     ("drop_surge", contract.M_DROP), ("router_bias_runaway", f"{bias0}/2")}


def test_a_bias_climbing_back_through_zero_is_balancing_not_a_runaway():
    """What a demo run's layer-3 expert 12 did: pushed to -1.85 by step 240 (overloaded early), then climbing at a
    steady pace to +0.44 by step 540 and levelling off there. Its neighbours barely moved."""
    rows = _moe(1200, seed=3)
    bias0 = contract.router_metric(0, "router_bias")
    for s in range(1200):
        down, up = min(s, 240) / 240, min(max(s - 240, 0), 300) / 300
        rows[s][f"{bias0}/4"] += -1.85 * down + 2.3 * up
    assert [a for a in opened(feed(Monitor(), enumerate(rows))) if a.kind == "router_bias_runaway"] == []
    for s in range(700, 1200):  # the same expert then running away (away from zero) is still found
        rows[s][f"{bias0}/4"] += 0.004 * (s - 700)
    found = [(a.kind, a.metric) for a in opened(feed(Monitor(), enumerate(rows)))]
    assert ("router_bias_runaway", f"{bias0}/4") in found


def test_an_expert_load_episode_starts_where_the_imbalance_started():
    det = ExpertLoadDetector(metric=contract.router_metric(0, "routing_hist"), sustain=5, warmup=0)
    st, events = det.init(), []
    for s in range(30):
        st, ev = det.update(st, s, {e: (900.0 if e == 1 and s >= 10 else 100.0) for e in range(4)})
        events += ev
    [e] = events
    assert (e.anomaly.kind, e.anomaly.start_step, e.at) == ("hot_expert", 10, 14)


# ---------------------------------------------------------------------------------------------- purity
def test_update_never_mutates_the_state_it_is_given_and_states_are_plain_json():
    det = SpikeDetector(metric=contract.M_LOSS)
    st = det.init()
    for s, x in enumerate(falling(50) + [9.0, 9.5, 3.0]):
        before = copy.deepcopy(st)
        new, _ = det.update(st, s, x)
        assert st == before
        assert json.loads(json.dumps(new, allow_nan=False)) == new
        st = new
