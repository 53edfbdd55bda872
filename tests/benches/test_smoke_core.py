"""Smoke runs of the benches that need no web server: seconds each, the real code paths, results filed."""

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.bench]


def test_query(run_bench):
    out, _ = run_bench("query", "--points-total", "20000", "--points", "1000", "--repeat", "1")
    assert out["cases"]


def test_export(run_bench):
    out, _ = run_bench("export", "--points", "2000", "--repeat", "1", "--json")
    assert set(out["formats"]) == {"csv", "json", "parquet"} and out["formats"]["csv"]["bytes"] > 0


def test_operate(run_bench):
    out, _ = run_bench("operate", "--runs", "2", "--commands", "5", "--points", "50", "--repeat", "1")
    assert out


def test_trim(run_bench):
    out, _ = run_bench("trim", "--read", "2000", "--behind", "5000")
    assert out["publish_s"] >= 0


def test_ingest(run_bench):
    out, _ = run_bench("ingest", "--runs", "1", "--steps", "20", "--backends", "sqlite", "--consumers", "1", "--json")
    assert out["results"] and "error" not in out["results"][0]


def test_tb_import(run_bench):
    out, _ = run_bench("tb_import", "--runs", "1", "--steps", "200", "--tags", "2", "--json")
    assert out


def test_anomaly_live(run_bench):
    out, _ = run_bench("anomaly_live", "--steps", "30")
    assert out


@pytest.mark.parametrize("args, topic", [(("--bootstrap", "2"), "scaling_ladders")])
def test_scaling_ladders(run_bench, args, topic):
    out, _ = run_bench("scaling_ladders", *args, topic=topic)
    assert out


def test_scaling(run_bench):
    out, _ = run_bench("scaling", "--bootstrap", "2", "--rungs", "8", "--ladders-bootstrap", "2", "--json")
    assert set(out["laws"]) and out["rungs"] == 8
