"""`bench/query.py` as the README shows it, on a fresh checkout: it migrates its own throwaway database (no
`no such table: metrics_series`), needs no OBS_DEBUG or secret key, keeps every spike, and leaves nothing behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ..servers import ROOT


@pytest.mark.parametrize("debug", [{}, {"OBS_DEBUG": "1"}], ids=["as-documented", "with-OBS_DEBUG"])
def test_bench_query_runs_on_a_fresh_checkout(tmp_path, debug):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OBS_", "DJANGO_", "DATABASE_", "PYTHON"))}
    out = subprocess.run([sys.executable, "bench/query.py", "--points-total", "20000", "--points", "1000",
                          "--repeat", "1"], cwd=ROOT, env={**env, **debug, "OBS_DATA_DIR": str(tmp_path),
                                                          "BENCH_RESULTS_DIR": str(tmp_path / "results")},
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout)
    assert result["database"] == "sqlite" and result["points_total"] == 20000
    assert all(q["spikes_kept"].split("/")[0] == q["spikes_kept"].split("/")[1] for q in result["queries"])
    assert not list(tmp_path.glob("bench-query*"))  # the throwaway database is gone (kept only with --keep)
    assert (tmp_path / "results" / "query.json").exists()  # filed, as every bench files its result
