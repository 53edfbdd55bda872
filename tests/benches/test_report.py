"""bench/harness.py files a run with where and when it was measured; bench/report.py renders the newest run of a
topic with its target and title (bench/results/targets.json, itself no topic), its landed-vs-new ratios, and the
topic's narrative."""

import importlib.util
import json
import sys

from .conftest import ROOT


def _load(name):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(ROOT / "bench"))
    spec.loader.exec_module(module)
    return module


def test_a_filed_run_renders_as_the_newest_figures_with_target_and_ratio(tmp_path, monkeypatch):
    harness, report = _load("harness"), _load("report")
    monkeypatch.setattr(harness, "RESULTS", tmp_path)
    monkeypatch.setattr(report, "RESULTS", tmp_path)
    harness.save("latency", {"p50_ms": 99.0}, ["--seconds", "1"])
    harness.save("latency", {"p50_ms": 41.5, "p99_ms": 180.0, "ratio_this_over_landed": 0.8}, ["--seconds", "30"])
    harness.save("latency", {"p50_ms": 1.0, "quick": "smoke-sized"}, [])  # a smoke run: never the newest figures
    (tmp_path / "latency.md").write_text("Earlier: 63.8 / 450.9 ms on a loaded box.\n")
    filed = json.loads((tmp_path / "latency.json").read_text())
    run = filed["runs"][1]
    assert run["argv"] == ["--seconds", "30"] and run["machine"]["cpus"] >= 1 and "load1" in run["machine"]
    assert run["date"].endswith("Z") and run["commit"]
    text = "\n".join(report.section("latency"))
    assert "| p50_ms | 41.5 |" in text and "| p50_ms | 99.0 |" not in text and "| p50_ms | 1.0 |" not in text
    assert "**Target:** publish → browser p50 ≤ 50 ms" in text
    assert "| ratio_this_over_landed | 0.8 |" in text.split("Compared in the same run")[1]
    assert "63.8 / 450.9 ms" in text and "(3 run(s) filed)" not in text and "(2 run(s) filed)" in text
    (tmp_path / "targets.json").write_text("{}")  # where the real one lies: the targets, not a topic's runs
    page = report.render()
    assert "## Publish → browser latency (hub) (`latency`)" in page and "`targets`" not in page
