"""The anomaly detectors on harder curves: climbs hidden in noise (and across a snapshot or a rewind), slowdowns
while other processes take the CPU, hiccups against lasting shifts, and the severity each finding carries. The
curves and helpers are tests/observatory/test_anomalies_detectors.py's."""

from __future__ import annotations

import json
import math
import random

from observatory import contract
from observatory.anomalies import AnomalyLog, Monitor
from observatory.anomalies.detectors import SpikeDetector
from tests.observatory.anomaly_feed import feed
from tests.observatory.test_anomalies_detectors import _moe, _norms, opened


# ---------------------------------------------------------------------------------------------- multi-step climbs
def _noisy(n: int, seed: int, noise: float = 0.05) -> list[float]:
    """The demo's loss after warmup: slowly falling, with 5% per-step noise (a small batch)."""
    rnd = random.Random(seed)
    return [(2.0 + 2.0 * (1 + s / 200) ** -0.5) * math.exp(rnd.gauss(0, noise)) for s in range(n)]


def _lr_spike(curve: list[float], at: int) -> None:
    """What an injected LR spike did to the demo's loss: ~1.55x over 5 steps, a plateau, a slow way back."""
    for k, f in enumerate([1.1, 1.2, 1.32, 1.45, 1.55, 1.5, 1.55, 1.5, 1.4, 1.3, 1.25, 1.2, 1.15, 1.1]):
        curve[at + k] *= f


def test_a_climb_hidden_in_5_percent_noise_is_one_spike_against_the_level_before_it():
    curve = _noisy(1500, seed=11)
    _lr_spike(curve, 1000)
    events = feed(Monitor(), [(s, {contract.M_LOSS: x}) for s, x in enumerate(curve)])
    [a] = opened(events)
    first = next(e for e in events if e.action == "opened")
    assert a.kind == "loss_spike" and 1000 <= a.start_step <= first.at <= 1006
    final = [e.anomaly for e in events if e.anomaly.key == a.key][-1]
    assert final.score > 1.35 and final.severity in ("warning", "critical")


def _run(det: SpikeDetector, curve: list[float]) -> list:
    st, found = det.init(), []
    for s, x in enumerate(curve):
        st, ev = det.update(st, s, x)
        found += ev
    return found


def test_the_climb_rule_finds_what_the_single_point_rules_miss():
    # ±5% zig-zag noise (a spread of exactly 5%), then a climb to 1.45x over 5 steps, a plateau, the way back
    curve = [3.0 * (1.05 if s % 2 else 0.95) for s in range(1100)]
    for k, f in enumerate([1.09, 1.18, 1.27, 1.36, 1.45, 1.45, 1.45, 1.4, 1.3, 1.2, 1.1]):
        curve[1000 + k] *= f
    # the spread learns the climb's first steps: no point stands out by itself against the running level
    assert _run(SpikeDetector(metric=contract.M_LOSS, climb_ratio=None, drift_ratio=None), curve) == []
    found = _run(SpikeDetector(metric=contract.M_LOSS, drift_ratio=None), curve)
    assert [e.action for e in found][0] == "opened" and [e.action for e in found][-1] == "closed"
    a = found[0].anomaly
    assert 1000 <= a.start_step <= found[0].at <= 1005 and len([e for e in found if e.action == "opened"]) == 1
    assert "its level before the climb (step 99" in a.explanation and a.explanation.startswith("train/loss ")


def test_5_percent_noise_without_a_climb_raises_nothing_over_10k_steps():
    curve = _noisy(10_000, seed=13)
    assert feed(Monitor(), [(s, {contract.M_LOSS: x}) for s, x in enumerate(curve)]) == []


def test_a_climb_found_after_a_snapshot_and_restore_is_the_same_climb():
    curve = _noisy(1200, seed=14)
    _lr_spike(curve, 1000)
    rows = [(s, {contract.M_LOSS: x}) for s, x in enumerate(curve)]
    whole = feed(Monitor(), rows)
    first = Monitor()
    before = feed(first, rows[:1002])  # the ring holds the climb's first steps
    second = Monitor().restore(json.loads(json.dumps(first.snapshot(), allow_nan=False)))
    assert before + feed(second, rows[1002:]) == whole and opened(whole)


def test_a_rewind_into_a_climb_supersedes_it_and_the_replay_finds_it_again():
    curve = _noisy(1200, seed=15)
    _lr_spike(curve, 1000)
    rows = [(s, {contract.M_LOSS: x}) for s, x in enumerate(curve)]
    mon = Monitor()
    [a] = opened(feed(mon, rows[:1010]))
    gone = mon.rewind(990)
    assert [(e.action, e.anomaly.key) for e in gone] == [("superseded", a.key)]
    [b] = opened(feed(mon, rows[991:1010]))
    assert 1000 <= b.start_step <= b.peak_step <= 1009


# ---------------------------------------------------------------------------------------------- host contention
def _contended(n: int, at: int, share: float, seed: int = 0) -> list[dict]:
    """Step time +60% from `at`; the trainer's share of the host CPU falls to `share` of usual from then on
    (hardware sampled every 5th step, as a 1 s sampler does at ~5 steps a second)."""
    rnd = random.Random(seed)
    out = []
    for s in range(n):
        slow = 1.6 if s >= at else 1.0
        v = {contract.M_STEP_TIME: 0.2 * slow * (1 + rnd.gauss(0, 0.02))}
        v[contract.M_TOKENS_PER_S] = 1024 / v[contract.M_STEP_TIME]
        if s % 5 == 0:
            proc = 180.0 * (share if s >= at else 1.0) * (1 + rnd.gauss(0, 0.03))
            v.update({contract.HW_CPU_PERCENT: 97.0 * (1 + rnd.gauss(0, 0.01)), contract.HW_PROCESS_CPU: proc})
        out.append(v)
    return out


def test_a_slowdown_while_other_processes_take_the_cpu_is_one_host_notice_and_says_so():
    events = feed(Monitor(), enumerate(_contended(1200, 800, share=0.5)))
    found = opened(events)
    # the host's, not the run's: one notice (step time tells it; throughput, the same slowdown, keeps quiet)
    assert [(a.kind, a.metric) for a in found] == [("host_contention", contract.M_STEP_TIME)]
    assert all(a.severity == "info" and "other processes compete for the CPU" in a.explanation for a in found)
    assert found[0].explanation.startswith("the host, not the run: ")
    assert all(e.anomaly.severity == "info" and e.anomaly.kind == "host_contention" for e in events)


def test_a_slowdown_with_the_trainers_cpu_share_intact_stays_critical():
    found = opened(feed(Monitor(), enumerate(_contended(1200, 800, share=1.0))))
    assert {a.kind for a in found} == {"step_time_rise", "throughput_drop"}
    assert all(a.severity == "critical" and "compete" not in a.explanation for a in found)


def _hiccup(n: int, at: int, length: int, step_s: float = 0.35, seed: int = 0) -> list[tuple[int, dict, float]]:
    """The demo's speed (~0.35 s steps, the trainer holding its CPU share) with steps [at, at + length) 40%
    slower: (step, values, wall time)."""
    rnd, t, out = random.Random(seed), 1.7e9, []
    for s in range(n):
        dt = step_s * (1.4 if at <= s < at + length else 1.0) * (1 + rnd.gauss(0, 0.02))
        t += dt
        v = {contract.M_STEP_TIME: dt, contract.M_TOKENS_PER_S: 1024 / dt}
        if s % 3 == 0:
            v.update({contract.HW_CPU_PERCENT: 91.0, contract.HW_PROCESS_CPU: 180.0 * (1 + rnd.gauss(0, 0.02))})
        out.append((s, v, t))
    return out


def test_a_slowdown_of_a_few_seconds_is_a_hiccup_and_one_that_lasts_is_a_shift():
    def found(rows):
        mon = Monitor()
        return opened([e for s, v, t in rows for e in mon.observe(s, v, t)])

    # 8 slow steps: past `sustain` points, but under 3 s of wall time (a checkpoint write, a stage switch)
    assert found(_hiccup(800, 500, 8)) == []
    # the same 8 steps without wall times: the points alone decide, as before
    assert {a.kind for a in opened(feed(Monitor(), [(s, v) for s, v, _ in _hiccup(800, 500, 8)]))} == {
        "step_time_rise", "throughput_drop"}
    # 60 slow steps (~29 s): a slowdown, opened once it has lasted min_s, dated from where it began
    long = found(_hiccup(800, 500, 60))
    assert {a.kind for a in long} == {"step_time_rise", "throughput_drop"}
    assert all(a.severity == "critical" and 498 <= a.start_step <= 504 for a in long)


# ---------------------------------------------------------------------------------------------- expert warmup
def test_an_unbalanced_router_early_in_training_raises_nothing():
    rows = _moe(1200, seed=3)
    hist = contract.router_metric(0, "routing_hist")
    for s in range(250):  # the router starts unbalanced; the bias evens it out over the first ~250 steps
        rows[s][f"{hist}/1"] *= 6 * (1 - s / 250) + 1
        rows[s][f"{hist}/2"] *= 0.02 + s / 250
    assert feed(Monitor(), enumerate(rows)) == []


def test_a_rise_back_from_a_low_outlier_is_not_a_spike_however_far_above_the_outlier():
    curve = _noisy(600, seed=16, noise=0.02)
    curve[500] *= 0.7  # an easy batch; the next value is ~1.4x it, but at the level
    assert feed(Monitor(), [(s, {contract.M_LOSS: x}) for s, x in enumerate(curve)]) == []


def test_a_per_domain_loss_climb_keeps_its_severity_while_its_single_point_spikes_are_info():
    name = contract.domain_loss("code")
    curve = _noisy(1500, seed=17, noise=0.08)
    curve[700] *= 1.8  # one odd sequence
    _lr_spike(curve, 1000)
    events = feed(Monitor(), [(s, {name: x}) for s, x in enumerate(curve)])
    found = opened(events)
    assert (found[0].start_step, found[0].severity) == (700, "info")  # and over at the next point
    assert [e.anomaly.end_step for e in events if e.anomaly.key == found[0].key][-1] == 701
    loud = [a for a in found if a.severity != "info"]
    assert len(loud) == 1 and 1000 <= loud[0].start_step <= 1006 and "before the climb" in loud[0].explanation
    assert all(a.start_step >= 1000 for a in found[1:])  # anything else is the climb's own points, as info


def test_grad_norm_spikes_before_step_500_are_info_and_later_ones_warnings():
    rows = _norms(1200, seed=4)
    for s in (200, 201, 900, 901):  # each stays up for two logged points
        rows[s][contract.M_GRAD_NORM] *= 3
    log = AnomalyLog()
    log.apply(feed(Monitor(), enumerate(rows)))
    found = [(a.start_step, a.severity) for a in log.anomalies() if a.kind == "grad_norm_spike"]
    assert found == [(200, "info"), (900, "warning")]


def test_a_one_point_grad_norm_spike_is_info_and_one_that_stays_up_takes_its_severity():
    rows = _norms(1200, seed=4)
    rows[700][contract.M_GRAD_NORM] *= 7  # back at the next point: llm.c GPT-2 124M had 7.5x at step 9025
    rows[900][contract.M_GRAD_NORM] *= 6
    rows[901][contract.M_GRAD_NORM] *= 6
    events = feed(Monitor(), enumerate(rows))
    log = AnomalyLog()
    log.apply(events)
    found = [(a.start_step, a.severity) for a in log.anomalies() if a.kind == "grad_norm_spike"]
    assert found == [(700, "info"), (900, "critical")]
    [up] = [e for e in events if e.action == "updated" and e.anomaly.start_step == 900]
    assert up.at == 901


def test_a_slowdown_on_a_host_saturated_by_others_from_the_start_is_info():
    rows = _contended(1200, 800, share=1.0)
    for v in rows:  # the trainer never had more than ~half a core of a busy host
        if contract.HW_PROCESS_CPU in v:
            v[contract.HW_PROCESS_CPU] *= 0.25
    found = opened(feed(Monitor(), enumerate(rows)))
    assert [a.kind for a in found] == ["host_contention"]
    assert all(a.severity == "info" for a in found)


def test_a_host_saturated_when_its_first_readings_come_during_a_slowdown_is_read_without_error():
    """The host's CPU first read while a shift is under way (no usual share learned: it is learned outside shifts
    only), on a host saturated by others (busy from the start): no share to compare with, and no TypeError (seen
    in ingest, where it stopped the run's anomaly detection at every batch)."""
    rows = _contended(1200, 800, share=1.0)
    for s, v in enumerate(rows):
        if s < 830:  # the hardware sampler starts late: the slowdown at 800 has begun its streak
            v.pop(contract.HW_CPU_PERCENT, None)
            v.pop(contract.HW_PROCESS_CPU, None)
        elif contract.HW_PROCESS_CPU in v:
            v[contract.HW_PROCESS_CPU] *= 0.25  # under a core's worth of a 97%-busy host
    found = opened(feed(Monitor(), enumerate(rows)))
    assert {a.kind for a in found} == {"step_time_rise", "throughput_drop"}
    assert all(795 <= a.start_step <= 830 for a in found), [(a.kind, a.start_step, a.severity) for a in found]
