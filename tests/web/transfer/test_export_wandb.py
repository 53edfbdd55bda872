"""manage.py export_wandb writes a W&B offline run (wandb itself, offline, no network) that import_wandb reads back
under another id with every point identical: values to the last bit, NaN/±Inf, sparse series, gaps in steps."""

from __future__ import annotations

import io
import math
import os

import pytest
from django.core.management import CommandError, call_command
from django.db import transaction

from observatory import contract
from webapp.metrics.apply import apply_messages
from webapp.metrics.models import Point, Series
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db
T = 1_700_000_000.0


def _value(step: int) -> float:
    if step % 97 == 13:
        return (math.nan, math.inf, -math.inf)[step % 3]
    return (step + 1) / 3 * (1e-300 if step % 5 == 0 else 1.0) * (-1) ** step  # every bit of a double counts


def _run(run_id: str) -> None:
    msgs = [contract.Message(run_id, "run", {"t": T, "name": "to export", "config": {"lr": 3e-4, "layers": 2}})]
    for step in list(range(1000)) + [5000, 123_456_789]:  # gaps, and a big step
        values = {contract.M_LOSS: _value(step), contract.M_LR: 1e-3 / (step + 1)}
        if step % 7 == 0:
            values["eval/loss"] = _value(step + 1)  # a sparse series
        msgs.append(contract.Message(run_id, "metrics", {"t": T + step, "step": step, "values": values}))
    with transaction.atomic():
        apply_messages([("", m) for m in msgs])


def _points(run_id):
    return {s.name: list(Point.objects.filter(series=s).order_by("step").values_list("step", "value", "special"))
            for s in Series.objects.filter(run_id=run_id)}


def test_an_exported_run_imports_back_identical(tmp_path):
    pytest.importorskip("wandb")
    _run("source-run")
    out = io.StringIO()
    call_command("export_wandb", "source-run", "--dir", str(tmp_path), stdout=out)
    text = out.getvalue()
    assert "1,002 steps" in text and "wandb sync" in text
    (path,) = [line.split(" to ")[-1] for line in text.splitlines() if line.startswith("exported")]
    assert os.path.dirname(path) == str(tmp_path / "wandb") and os.path.basename(path).startswith("offline-run-")

    call_command("import_wandb", path, "--run-id", "round-trip", stdout=io.StringIO())
    want, got = _points("source-run"), _points("round-trip")
    assert sorted(got) == sorted(want) == sorted([contract.M_LOSS, contract.M_LR, "eval/loss"])
    for name in want:
        assert got[name] == want[name], name  # (step, value, special) exact, NaN/Inf included
    assert len(want["eval/loss"]) == 143 and sum(1 for p in want[contract.M_LOSS] if p[2]) == 11
    back = Run.objects.get(pk="round-trip")
    assert (back.name, back.config["lr"], back.config["observatory_run_id"]) == ("to export", 3e-4, "source-run")


def test_exporting_a_missing_or_empty_run_is_refused(tmp_path):
    with pytest.raises(CommandError, match="no run 'nope'"):
        call_command("export_wandb", "nope", "--dir", str(tmp_path))
    Run.objects.create(id="empty")
    with pytest.raises(CommandError, match="no series"):
        call_command("export_wandb", "empty", "--dir", str(tmp_path))
