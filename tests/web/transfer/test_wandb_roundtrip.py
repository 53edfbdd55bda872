"""Issue 4: the W&B offline mirror written by the real trainer imports back into Observatory with the same values."""

from __future__ import annotations

import glob
import io
import json
import math
import os
import subprocess
import sys

import pytest
from django.core.management import call_command

from observatory import contract
from webapp.metrics.models import Point, Series
from webapp.transfer.wandb_file import read_run

from ..servers import ROOT, wait_for

TOML = """
[run]
name = "wandb-mirror"
seed = 2
[model]
vocab_size = 256
d_model = 32
n_layers = 1
n_heads = 2
n_kv_heads = 1
d_ff = 64
seq_len = 32
mlp = "dense"
[train]
batch_size = 4
token_budget = 1000000
[data]
builtin_domains = ["python_stdlib", "licenses"]
max_bytes_per_domain = 100000
[checkpoint]
dir = "{tmp}/ckpt"
every_steps = 0
every_minutes = 0.0
[sinks]
redis = false
wandb = "offline"
wandb_dir = "{tmp}"
"""


@pytest.mark.slow
@pytest.mark.django_db
def test_the_trainers_wandb_mirror_imports_back_with_the_same_values(tmp_path, run_id):
    cfg = tmp_path / "c.toml"
    cfg.write_text(TOML.format(tmp=tmp_path))
    jsonl = tmp_path / "mirror.jsonl"
    env = {**os.environ, "WANDB_SILENT": "true"}
    env.pop("WANDB_MODE", None)
    p = subprocess.run([sys.executable, "-m", "training", "run", "--config", str(cfg), "--run-id", run_id,
                        "--steps", "12", "--fresh", "--no-redis", "--metrics-jsonl", str(jsonl)],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    runs = glob.glob(str(tmp_path / "wandb" / "offline-run-*"))
    assert len(runs) == 1, (runs, p.stderr[-3000:])  # (the trainer's W&B warnings say why where there is none)
    (run_dir,) = runs
    # the trainer exiting is not W&B's service having written the log out: its exit record comes last
    wait_for(lambda: read_run(run_dir)["exit_code"] is not None, 60, "W&B to finish writing the offline run")

    out = io.StringIO()
    call_command("import_wandb", run_dir, "--run-id", "imported", stdout=out)

    # What the trainer published (its JSONL mirror) is what W&B recorded and what Observatory imported.
    published = {}
    for line in jsonl.read_text().splitlines():
        rec = json.loads(line)
        if rec.get("kind") == "metrics":
            published[rec["step"]] = rec["values"]
    assert len(published) == 12
    for name in (contract.M_LOSS, contract.M_LR, contract.M_GRAD_NORM):
        series = Series.objects.get(run_id="imported", name=name)
        got = dict(Point.objects.filter(series=series).values_list("step", "value"))
        want = {s: v[name] for s, v in published.items()}
        assert sorted(got) == sorted(want)
        for s in want:
            assert math.isclose(got[s], want[s], rel_tol=1e-6), (name, s, got[s], want[s])
