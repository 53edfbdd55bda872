"""Smoke runs of the live-path benches: the hub and the push tier with a few viewers, a browser on the page."""

import shutil

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.bench]
FEW = ("--viewers", "5", "--seconds", "2", "--settle", "0.5", "--tail", "0.5", "--json")


def test_fanout_hub(run_bench):
    out, _ = run_bench("fanout", *FEW)
    assert out["tiers"]["hub"]["connected"] == 5 and out["tiers"]["hub"]["delivered_fraction"] > 0


@pytest.mark.skipif(not shutil.which("nginx"), reason="nginx + nchan not installed")
def test_fanout_both_tiers(run_bench):
    out, _ = run_bench("fanout", "--tier", "hub,nchan", *FEW, topic="push_tier")
    assert out["tiers"]["nchan"]["connected"] == 5


@pytest.mark.browser
def test_latency(run_bench):
    out, _ = run_bench("fanout", "--browser", "--seconds", "2", "--width", "2", "--json", topic="latency")
    assert out["publish_to_browser"]["steps_received"] > 0


@pytest.mark.browser
@pytest.mark.skipif(not shutil.which("nginx"), reason="nginx + nchan not installed")
def test_latency_through_the_push_tier(run_bench):
    out, _ = run_bench("fanout", "--browser", "--seconds", "2", "--tier", "nchan", "--others", "1000", "--json",
                       topic="latency_nchan")
    got = out["publish_to_browser"]
    assert got["push_steps_received"] > 0  # and the crowd, all at once, all in (else the bench exits 2)
    assert (got["others_connected"], got["others_failed"], got.get("error")) == (1000, 0, None)


@pytest.mark.skipif(not shutil.which("nginx"), reason="nginx + nchan not installed")
def test_chaos_push_tier_outage(run_bench):
    out, _ = run_bench("chaos", "--outage", "stop,freeze", "--outage-seconds", "2", "--baseline-seconds", "1",
                       "--json", topic="push_outage")
    assert [s["mode"] for s in out["scenarios"]] == ["stop", "freeze"]
    assert all(s["all_stored"] and s["logged_lost"] == 0 and s["duplicates"] == 0 for s in out["scenarios"])
