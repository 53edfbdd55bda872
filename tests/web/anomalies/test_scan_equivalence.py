"""The scanner and the live path give the same anomalies for the same data: a curve goes through
`python -m observatory.anomalies scan` and, as trainer messages, through ingest with the detection hook."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from observatory.anomalies.scan import open_text, read_rows

from ..servers import ROOT
from . import curves

pytestmark = pytest.mark.django_db(transaction=True)

DEMO_NAN = ROOT / "bench" / "data" / "anomalies" / "v1-nan.csv.gz"  # the demo trainer, a NaN injected (bench data)


def scan_cli(path: Path) -> list[tuple]:
    out = subprocess.run([sys.executable, "-m", "observatory.anomalies", "scan", str(path)], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    return curves.scanned(json.loads(line) for line in out.splitlines())


def test_a_synthetic_curve_gives_the_same_log_both_ways(trainer, live_ingest, run_id, tmp_path):
    data = curves.rows()
    curves.write_csv(tmp_path / "curve.csv", data)
    curves.publish(trainer, data)
    live_ingest.drain()
    found = scan_cli(tmp_path / "curve.csv")
    assert curves.stored(run_id) == found
    assert {"loss_spike", "nonfinite", "grad_norm_spike"} <= {k for k, *_ in found}


def test_a_recorded_demo_run_gives_the_same_log_both_ways(trainer, live_ingest, run_id):
    """~235 metrics a step from the real trainer (a NaN injected at step 265), steps and times as recorded."""
    with open_text(DEMO_NAN) as f:
        rows = list(read_rows(f))
    curves.publish(trainer, [(step, values, t) for _, step, values, t in rows])
    live_ingest.drain()
    found = scan_cli(DEMO_NAN)
    assert curves.stored(run_id) == found
    assert ("nonfinite", "train/loss", 265) in {a[:3] for a in found}
