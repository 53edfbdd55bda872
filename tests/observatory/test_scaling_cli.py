"""`python -m observatory.scaling`: the JSON shape, the table, the forecast record, and bad files → exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from observatory.scaling.cli import main

ROOT = Path(__file__).resolve().parents[2]


def write_ladder(path: Path, noise=0.002) -> Path:
    """Twelve rungs, four sizes × three tokens-per-parameter ratios, in columns named as a ladder runner might."""
    N = np.repeat(np.geomspace(6.1e7, 1.2e9, 4), 3)
    D = N * np.tile([20.0, 200.0, 791.0], 4)
    L = (1.82 + 482.01 / N**0.3478 + 2085.43 / D**0.3658) * np.exp(np.random.default_rng(0).normal(0, noise, 12))
    rows = ["rung,active_params,tokens,final_loss"] + [f"r{i},{n:.6g},{d:.6g},{l:.6f}"
                                                      for i, (n, d, l) in enumerate(zip(N, D, L))]
    path.write_text("\n".join(rows) + "\n")
    return path


COLS = ["--columns", "N=active_params,D=tokens,L=final_loss"]


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_fit_json_shape(tmp_path, capsys):
    csv = write_ladder(tmp_path / "ladder.csv")
    code, out, err = run(capsys, "fit", csv, "--law", "chinchilla", *COLS, "--predict", "2.3e10,1.875e13",
                         "1e9,2e10", "--json", "--bootstrap", "12", "--seed", "3")
    assert code == 0, err
    doc = json.loads(out)
    assert {"law", "params", "bands", "predictions", "holdout_error"} <= set(doc)
    assert doc["law"] == "chinchilla" and set(doc["params"]) == {"E", "A", "B", "alpha", "beta"}
    assert set(doc["bands"]) == set(doc["params"]) and all(len(b) == 2 for b in doc["bands"].values())
    assert [set(p) >= {"N", "D", "loss", "low", "high"} for p in doc["predictions"]] == [True, True]
    hero = doc["predictions"][0]
    assert hero["N"] == 2.3e10 and hero["D"] == 1.875e13 and hero["low"] <= hero["loss"] <= hero["high"]
    assert 0 <= doc["holdout_error"] < 0.05 and doc["rows"] == 12 and doc["bootstrap"] == 12 and doc["seed"] == 3
    code2, out2, _ = run(capsys, "fit", csv, "--law", "chinchilla", *COLS, "--predict", "2.3e10,1.875e13",
                         "1e9,2e10", "--json", "--bootstrap", "12", "--seed", "3")
    assert out2 == out                                               # deterministic for a seed


def test_fit_auto_table_and_compute_column(tmp_path, capsys):
    csv = write_ladder(tmp_path / "ladder.csv")
    code, out, _ = run(capsys, "fit", csv, *COLS, "--law", "auto", "--bootstrap", "5", "--predict", "1e9,2e10")
    assert code == 0
    assert out.startswith("law ") and "held-out error on the 3 largest-compute row(s)" in out
    assert "auto: chinchilla" in out and "compute" in out and "overtrained" in out
    assert "alpha" in out and "1e+09" in out
    iso = tmp_path / "iso.csv"
    C = np.geomspace(5.5e19, 9.2e21, 6)
    iso.write_text("C,loss\n" + "".join(f"{c:.6g},{1.6 + 95.18 * c ** -0.0941:.8f}\n" for c in C))
    code, out, _ = run(capsys, "fit", iso, "--law", "compute", "--json", "--bootstrap", "0", "--predict",
                       "C=2.7e24", "2.3e10,1.875e13,2.7e24", "2.3e10,1.875e13")
    doc = json.loads(out)
    assert code == 0 and doc["bands"] is None and doc["predictions"][0]["low"] is None
    assert doc["params"]["alpha"] == pytest.approx(0.0941, rel=1e-3)
    expected = 1.6 + 95.18 * 2.7e24**-0.0941
    assert [p["loss"] for p in doc["predictions"][:2]] == pytest.approx([expected, expected], rel=1e-4)
    assert doc["predictions"][1]["N"] == 2.3e10 and doc["predictions"][2]["C"] == pytest.approx(6 * 2.3e10 * 1.875e13)


def test_forecast_record_hash_is_stable_across_processes(tmp_path):
    csv = write_ladder(tmp_path / "ladder.csv")
    cmd = [sys.executable, "-m", "observatory.scaling", "forecast", str(csv), *COLS, "--law", "chinchilla",
           "--hero", "2.3e10,1.875e13", "--bootstrap", "10", "--points", "16", "--json"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    outs = [subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=60) for _ in range(2)]
    assert [o.returncode for o in outs] == [0, 0], outs[0].stderr
    a, b = (json.loads(o.stdout) for o in outs)
    assert a["sha256"] == b["sha256"] and len(a["sha256"]) == 64
    assert len(a["curve"]["tokens"]) == 16 and a["hero"]["N"] == 2.3e10


@pytest.mark.parametrize("content,args,message", [
    (None, [], "cannot read"),
    ("", [], "empty file"),
    ("N,D,L\n", [], "no data rows"),
    ("active_params,tokens,final_loss\n1e8,2e9,3.1\n", ["--columns", "N=params,D=tokens,L=final_loss"],
     "no column 'params' for N"),
    ("N,D,L\n1e8,2e9,3.1\n2e8,lots,3.0\n", [], "line 3: column 'D' is not a number: 'lots'"),
    ("N,D,L\n1e8,2e9,3.1\n2e8,4e9,-3.0\n", [], "line 3: column 'L' must be a positive number"),
    ("N,D,L\n0,2e9,3.1\n", [], "line 2: column 'N' must be a positive number"),
    ("N,D,L\n1e8,2e9,3.1\n2e8,4e9,3.0\n4e8,8e9,2.9\n", ["--law", "chinchilla"],
     "3 rows are fewer than the 5 parameters of law chinchilla"),
    ("C,L\n1e20,3.1\n2e20,3.0\n4e20,2.9\n", ["--law", "chinchilla"], "law chinchilla needs columns N and D"),
    ("N,tokens,L\n1e8,2e9,3.1\n", [], "N and D come together"),
    ("N,D,x\n1e8,2e9,3.1\n", [], "no loss column"),
    ("N,D,L\n1e8,2e9,3.1\n2e8,4e9,3.0\n", ["--law", "auto"], "too few"),
    ("N,D,L\n1e8,2e9,3.1\n", ["--predict", "1e9"], "expected N,D"),
    ("N,D,L\n1e8,2e9,3.1\n", ["--predict", "1e9,x"], "--predict '1e9,x': D is not a number"),
])
def test_bad_files_exit_2_with_one_line(tmp_path, capsys, content, args, message):
    path = tmp_path / "rungs.csv"
    if content is not None:
        path.write_text(content)
    code, out, err = run(capsys, "fit", path, "--bootstrap", "0", *args)
    assert code == 2 and out == ""
    assert err.startswith("error: ") and err.count("\n") == 1 and message in err, err


def test_binary_file_is_refused(tmp_path, capsys):
    path = tmp_path / "rungs.csv"
    path.write_bytes(b"\xff\xfe\x00garbage\x00")
    code, _, err = run(capsys, "fit", path)
    assert code == 2 and err.startswith("error: ") and "not a readable CSV" in err


def test_repeated_predict_accumulates(tmp_path, capsys):
    """`--predict A --predict B` predicts A and B (it used to keep only B), in the order given."""
    csv = write_ladder(tmp_path / "ladder.csv")
    code, out, err = run(capsys, "fit", csv, "--law", "chinchilla", *COLS, "--bootstrap", "0", "--json",
                         "--predict", "2.3e10,1.875e13", "--predict", "1e9,2e10", "3e9,6e10")
    assert code == 0, err
    assert [(p["N"], p["D"]) for p in json.loads(out)["predictions"]] == [(2.3e10, 1.875e13), (1e9, 2e10),
                                                                          (3e9, 6e10)]


def test_repeated_columns_accumulate(tmp_path, capsys):
    csv = write_ladder(tmp_path / "ladder.csv")
    code, out, err = run(capsys, "fit", csv, "--law", "chinchilla", "--columns", "N=active_params",
                         "--columns", "D=tokens", "--columns", "L=final_loss", "--bootstrap", "0", "--json")
    assert code == 0, err
    assert json.loads(out)["rows"] == 12


@pytest.mark.parametrize("args,message", [
    (["fit", "--law", "chinchilla", "--law", "compute"], "--law given more than once"),
    (["fit", "--seed", "1", "--seed", "1"], "--seed given more than once"),
    (["fit", "--bootstrap", "5", "--bootstrap", "10"], "--bootstrap given more than once"),
    (["fit", "--level", "0.9", "--level", "0.5"], "--level given more than once"),
    (["fit", "--holdout", "2", "--holdout", "3"], "--holdout given more than once"),
    (["fit", "--starts", "2", "--starts", "3"], "--starts given more than once"),
    (["forecast", "--hero", "2.3e10,1.875e13", "--hero", "1e9,2e10"], "--hero given more than once"),
    (["forecast", "--hero", "2.3e10,1.875e13", "--points", "8", "--points", "9"], "--points given more than once"),
])
def test_an_ambiguous_call_exits_2_naming_the_option(tmp_path, capsys, args, message):
    csv = write_ladder(tmp_path / "ladder.csv")
    with pytest.raises(SystemExit) as exc:
        main([args[0], str(csv), *args[1:]])
    out, err = capsys.readouterr()
    assert exc.value.code == 2 and out == ""
    assert message in err, err


@pytest.mark.parametrize("columns", [["--columns", "N=active_params", "--columns", "N=tokens"],
                                     ["--columns", "L=final_loss,L=tokens"]])
def test_a_role_mapped_twice_exits_2(tmp_path, capsys, columns):
    csv = write_ladder(tmp_path / "ladder.csv")
    code, out, err = run(capsys, "fit", csv, *columns, "--bootstrap", "0")
    role = columns[-1][0]
    assert code == 2 and out == "" and err.startswith(f"error: --columns maps {role} twice"), err


def test_the_same_mapping_twice_is_not_ambiguous(tmp_path, capsys):
    csv = write_ladder(tmp_path / "ladder.csv")
    code, _, err = run(capsys, "fit", csv, *COLS, "--columns", "L=final_loss", "--law", "chinchilla",
                       "--bootstrap", "0")
    assert code == 0, err
