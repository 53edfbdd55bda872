"""Smoke run of the anomaly detectors' evaluation (the whole labelled set: the longest of the core benches)."""

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.bench]


def test_anomalies(run_bench):
    out, _ = run_bench("anomalies", "--no-landed", "--no-cv", "--json")  # the CV alone takes minutes (issue 48)
    assert out["per_kind"] and out["runs"]["injected"] > 0 and "development" not in out
