"""The total loss's confirmation of single points (issue 48; chosen by cross-validation on the public development
logs, bench/anomaly_cv.py): in a log of every step one point is one batch's loss, and a finding stays info until 3
logged points stand out; a coarse log's single point keeps its severity."""

from __future__ import annotations

from observatory import contract
from observatory.anomalies import Monitor
from tests.observatory.anomaly_feed import feed
from tests.observatory.test_anomalies_detectors import falling, opened


def test_in_a_log_of_every_step_a_one_batch_outlier_is_info_and_a_spike_that_stands_3_points_a_warning():
    curve = falling(800, seed=6)
    curve[600] *= 1.6  # one batch's loss (llm.c / modded-nanogpt logs print one rank's batch loss every step)
    events = feed(Monitor(), [(s, {contract.M_LOSS: x}) for s, x in enumerate(curve)])
    assert [(e.action, e.anomaly.severity) for e in events] == [("opened", "info"), ("closed", "info")]
    curve = falling(3000, seed=3)
    curve[1500] *= 1.6  # the same jump in a log of every 10th step: a warning at once (sparse test below)
    [a] = opened(feed(Monitor(), [(s, {contract.M_LOSS: curve[s]}) for s in range(0, 3000, 10)]))
    assert a.start_step == 1500 and a.severity == "critical"
