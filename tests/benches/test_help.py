"""Every bench answers --help (its flags parse, its imports resolve) without starting anything."""

import subprocess
import sys

import pytest

from .conftest import BENCHES, RECORDERS, ROOT


@pytest.mark.parametrize("name", BENCHES + RECORDERS)
def test_every_bench_answers_help(name):
    out = subprocess.run([sys.executable, f"bench/{name}.py", "--help"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.startswith("usage:")


def test_the_benches_listed_are_the_bench_folder():
    """A new bench gets a --help test and a smoke run (add it to BENCHES and to a test_smoke_* file)."""
    parts = {"harness", "stack", "telemetry", "report", "viewer_client", "pagecost", "anomaly_cv", "scaling_cv",
             "heldout"}
    on_disk = sorted(p.stem for p in (ROOT / "bench").glob("*.py") if p.stem not in parts)
    assert on_disk == sorted(BENCHES)
