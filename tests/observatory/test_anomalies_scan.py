"""`python -m observatory.anomalies scan`: the same anomalies as the live Monitor, and clear errors on bad files."""

from __future__ import annotations

import csv
import json
import math
import random
import subprocess
import sys
from pathlib import Path

import pytest

from observatory import contract
from observatory.anomalies import AnomalyLog, Monitor
from observatory.anomalies.__main__ import main

ROOT = Path(__file__).resolve().parents[2]


def curve_rows(n: int = 1200, seed: int = 0) -> list[tuple[int, dict]]:
    """Loss every step with a spike, grad norm with a spike, eval loss every 100 steps, a NaN, and a slowdown."""
    rnd = random.Random(seed)
    rows = []
    for s in range(n):
        loss = (2.0 + 8.5 * (1 + s / 20) ** -0.47) * (1 + rnd.uniform(-0.01, 0.01)) * (1.5 if s == 700 else 1)
        tps = 12_000 * (1 + rnd.gauss(0, 0.01)) * (0.85 if s >= 1000 else 1)
        v = {contract.M_LOSS: loss, contract.M_GRAD_NORM: 0.4 * math.exp(rnd.gauss(0, 0.1)) * (8 if s == 500 else 1),
             contract.M_TOKENS_PER_S: tps}
        if s % 100 == 0:
            v[contract.M_EVAL_LOSS] = loss * 1.05
        if s == 300:
            v[contract.M_GRAD_NORM] = math.inf
        rows.append((s, v))
    return rows


def write_csv(path: Path, rows, columns: dict[str, str] | None = None, extra: dict | None = None) -> Path:
    """rows -> CSV; `columns` renames metrics to column headers; a metric absent from a row is an empty cell."""
    columns = columns or {}
    names = sorted({n for _, v in rows for n in v})
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step", *(columns.get(n, n) for n in names), *(extra or {})])
        for step, v in rows:
            w.writerow([step, *(repr(v[n]) if n in v else "" for n in names), *(extra or {}).values()])
    return path


def scan(capsys, *argv) -> tuple[int, list[dict], str]:
    code = main(["scan", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, [json.loads(line) for line in out.splitlines()], err


def test_the_scanner_reports_what_the_live_monitor_finds_on_the_same_rows(tmp_path, capsys):
    rows = curve_rows()
    code, records, err = scan(capsys, write_csv(tmp_path / "m.csv", rows))
    assert code == 0 and err == ""
    mon, log = Monitor(), AnomalyLog()
    for step, values in rows:
        log.apply(mon.observe(step, values))
    assert records == [{"run": None, **a.to_dict()} for a in log.anomalies()]
    found = {(r["kind"], r["metric"], r["start_step"]) for r in records}
    assert {("loss_spike", contract.M_LOSS, 700), ("grad_norm_spike", contract.M_GRAD_NORM, 500),
            ("nonfinite", contract.M_GRAD_NORM, 300)} <= found
    assert {r["kind"] for r in records} == {"loss_spike", "grad_norm_spike", "nonfinite", "throughput_drop"}
    assert set(records[0]) == {"run", "kind", "metric", "start_step", "peak_step", "end_step", "severity", "score",
                               "explanation"}


def test_map_reads_columns_under_other_names_and_ignores_unknown_ones(tmp_path, capsys):
    rows = curve_rows(900)
    path = write_csv(tmp_path / "wandb.csv", rows, {contract.M_LOSS: "loss", contract.M_GRAD_NORM: "grad_norm",
                                                    contract.M_TOKENS_PER_S: "tps", contract.M_EVAL_LOSS: "what"})
    code, plain, _ = scan(capsys, path)
    assert code == 0 and plain == []  # no column has a contract name: nothing is read
    code, mapped, _ = scan(capsys, path, "--map", "loss=train/loss", "--map", "grad_norm=grad/norm/total")
    assert code == 0
    assert {(r["kind"], r["start_step"]) for r in mapped} == {("loss_spike", 700), ("grad_norm_spike", 500),
                                                                ("nonfinite", 300)}


def test_a_run_column_splits_the_file_into_independent_runs(tmp_path, capsys):
    a, b = curve_rows(800), curve_rows(800, seed=1)
    path = tmp_path / "runs.csv"
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["run", "step", "train/loss"])
        for (s, va), (_, vb) in zip(a, b):  # interleaved, as an export of two runs might be
            w.writerow(["a", s, repr(va[contract.M_LOSS])])
            w.writerow(["b", s, repr(vb[contract.M_LOSS] * (1.3 if s == 200 else 1))])
    code, records, _ = scan(capsys, path)
    assert code == 0
    assert sorted((r["run"], r["start_step"]) for r in records) == [("a", 700), ("b", 200), ("b", 700)]


def test_empty_cells_are_missing_values_and_nan_cells_are_non_finite(tmp_path, capsys):
    path = tmp_path / "sparse.csv"
    path.write_text("step,train/loss,eval/loss\n0,3.0,\n10,,3.1\n20,3.0,\n30,nan,\n40,2.9,inf\n50,2.9,3.0\n")
    code, records, _ = scan(capsys, path)
    assert code == 0
    [r] = records
    assert (r["kind"], r["metric"], r["start_step"], r["end_step"], r["score"]) == (
        "nonfinite", "train/loss", 30, 50, 2.0)


def test_a_time_column_lets_the_scanner_find_stalls(tmp_path, capsys):
    path = tmp_path / "timed.csv"
    lines = ["step,timestamp,train/loss"] + [f"{s},{1000 + s + (600 if s >= 50 else 0)},3.0" for s in range(80)]
    path.write_text("\n".join(lines) + "\n")
    code, records, _ = scan(capsys, path)
    assert code == 0
    [r] = records
    assert (r["kind"], r["start_step"], r["end_step"], r["severity"]) == ("stall", 49, 50, "critical")


def test_a_step_going_back_is_a_rewind_that_drops_anomalies_of_the_superseded_points(tmp_path, capsys):
    path = tmp_path / "resumed.csv"
    body = [f"{s},{3.0 * (1.4 if s == 15 else 1)}" for s in range(20)] + [f"{s},3.0" for s in range(10, 30)]
    path.write_text("step,train/loss\n" + "\n".join(body) + "\n")
    code, records, _ = scan(capsys, path)
    assert (code, records) == (0, [])


@pytest.mark.parametrize("content, message", [
    ("", "the file is empty"),
    ("iteration,train/loss\n0,3.0\n", "no 'step' column (columns: iteration, train/loss)"),
    ("step,train/loss\n0,3.0\nten,3.1\n", "line 3, column step: 'ten' is not a number"),
    ("step,train/loss\n0,3.0\n1.5,3.1\n", "line 3: step '1.5' is not a whole number >= 0"),
    ("step,train/loss\n0,3.0\n1,abc\n", "line 3, column 'train/loss': 'abc' is not a number"),
    ("step,train/loss\n,3.0\n", "line 2: empty step"),
])
def test_bad_files_exit_2_with_a_one_line_message(tmp_path, capsys, content, message):
    path = tmp_path / "bad.csv"
    path.write_text(content)
    code, records, err = scan(capsys, path)
    assert (code, records) == (2, [])
    assert err == f"scan: {path}: {message}\n"


def test_unreadable_files_and_bad_maps_exit_2(tmp_path, capsys):
    code, _, err = scan(capsys, tmp_path / "missing.csv")
    assert code == 2 and "cannot read" in err and err.count("\n") == 1
    (tmp_path / "bin.csv").write_bytes(b"step,train/loss\n0,\xff\xfe\n")
    code, _, err = scan(capsys, tmp_path / "bin.csv")
    assert code == 2 and "cannot read" in err
    path = write_csv(tmp_path / "ok.csv", curve_rows(5))
    code, _, err = scan(capsys, path, "--map", "loss")
    assert code == 2 and "expected COLUMN=METRIC" in err


def test_the_module_runs_as_a_command(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("loss\n1\n")
    proc = subprocess.run([sys.executable, "-m", "observatory.anomalies", "scan", str(path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == f"scan: {path}: no 'step' column (columns: loss)"


def test_a_gzipped_csv_reads_as_the_plain_one_and_a_broken_one_exits_2(tmp_path, capsys):
    import gzip

    plain = write_csv(tmp_path / "m.csv", curve_rows())
    packed = tmp_path / "m.csv.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    code, from_plain, _ = scan(capsys, plain)
    code_gz, from_gz, err = scan(capsys, packed)
    assert code == code_gz == 0 and err == "" and from_gz == from_plain and from_plain
    (tmp_path / "cut.csv.gz").write_bytes(packed.read_bytes()[:200])
    code, _, err = scan(capsys, tmp_path / "cut.csv.gz")
    assert code == 2 and "cannot read" in err and err.count("\n") == 1
    (tmp_path / "not.csv.gz").write_bytes(plain.read_bytes())
    code, _, err = scan(capsys, tmp_path / "not.csv.gz")
    assert code == 2 and "cannot read" in err
