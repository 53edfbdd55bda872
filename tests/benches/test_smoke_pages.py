"""Smoke runs of the benches that measure pages in a real Chromium: a short history, one repetition."""

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.bench, pytest.mark.browser]


def test_dashboard(run_bench):
    out, _ = run_bench("dashboard", "--steps", "2000", "--repeat", "1")
    assert out["first_paint_ms"]["median"] > 0 and out["zoom_gesture_ms"]["every_chart_median"] > 0


@pytest.mark.parametrize("gpu", [False, True])
def test_liveview(run_bench, gpu):
    """Without a GPU (the default) and with --gpu: SwiftShader's, which the harness checks backs canvases and
    compositing (chrome://gpu) or fails the run."""
    out, _ = run_bench("liveview", "--seconds", "2", "--history", "50", "--json", *(["--gpu"] if gpu else []))
    assert out["updates"] > 0 and out["gpu"] is gpu
    assert out["allocated"]["kb_per_update"] > 0, "the window's JavaScript allocations, from V8's sampling profiler"


def test_annotations(run_bench):
    out, _ = run_bench("annotations", "--posts", "2", "--many", "20", "--json")
    assert out["live"]["drawn_p50_ms"] > 0


def test_ogimage(run_bench):
    out, _ = run_bench("query", "--preview", "--steps", "2000", "--repeat", "2", "--json", topic="ogimage")
    assert out["png_bytes"] > 0 and out["updates_as_run_advances"] and out["cached_ms"]["median"] > 0


def test_frontpage(run_bench):
    out, _ = run_bench("dashboard", "--front", "--steps", "2000", "--runs", "2", "--repeat", "1", "--compare", "HEAD",
                       "--json", topic="frontpage")
    assert out["fcp_ratio_front_over_landed"] > 0
