"""Smoke runs of the benches that need no web server: seconds each, the real code paths, results filed."""

import json

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.bench]


def test_query(run_bench):
    out, _ = run_bench("query", "--points-total", "20000", "--points", "1000", "--repeat", "1")
    assert out["queries"] and all(q["spikes_kept"].split("/")[0] == q["spikes_kept"].split("/")[1]
                                  for q in out["queries"])


def test_operate(run_bench):
    out, _ = run_bench("operate", "--runs", "2", "--commands", "5", "--points", "50", "--repeat", "1")
    assert out["snapshot_bytes"] > 0 and out["sync"]["median_ms"] > 0


def test_trim(run_bench):
    out, _ = run_bench("ingest", "--trim", "--read", "2000", "--behind", "5000", topic="trim")
    assert out["entries_lost"] == 0 and out["in_order"] and out["stream_length_at_end"] == 7000


def test_ingest(run_bench):
    out, _ = run_bench("ingest", "--runs", "1", "--steps", "20", "--backends", "sqlite", "--consumers", "1", "--json")
    assert out["results"][0]["stored"] == out["results"][0]["points"] == 20 * 242


def test_scaling_ladders(run_bench):
    """The public ladders alone (`scaling.py --public-only`), filed as their own topic."""
    out, _ = run_bench("scaling", "--public-only", "--ladders-bootstrap", "2", "--starts", "4", "--no-cv", "--json",
                       topic="scaling_ladders")
    assert out["ladders"]["chinchilla_hoffmann2022"]["rungs"] > 0 and out["ladders_summary"]["auto"]


def test_scaling(run_bench):
    # --starts 4: a smoke's few grid starts per fit (the default's 64 cost most of the run's CPU, same JSON shape)
    out, _ = run_bench("scaling", "--bootstrap", "2", "--rungs", "8", "--ladders-bootstrap", "2", "--starts", "4",
                       "--no-cv", "--json")
    assert set(out["laws"]) and out["rungs"] == 8


def test_the_demo_recorder_converts_a_trainer_jsonl(run_bench, tmp_path):
    """The recorder's conversion (recording itself runs the demo for minutes): a clean run's JSONL to a CSV."""
    jsonl = tmp_path / "clean.jsonl"
    jsonl.write_text("".join(
        json.dumps({"kind": "metrics", "t": 1.7e9 + s, "step": s, "values": {"train/loss": 3.0 - s / 100}}) + "\n"
        for s in range(40)))
    out, _ = run_bench("data/anomalies/record_demo", "--convert", "clean", str(jsonl), "--out", str(tmp_path / "out"),
                       filed=False)
    assert out["rows"] == 40 and out["labels"] == []
    assert (tmp_path / "out" / "demo-clean.csv.gz").exists()
