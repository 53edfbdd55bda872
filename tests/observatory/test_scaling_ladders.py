"""The public ladders of bench/data/ladders (read by its ladders.py, evaluated by bench/scaling.py): every file
loads, parses and holds what its README says: rungs to fit and larger held-out runs, values as in the source files."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from observatory import scaling

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("bench_scaling", ROOT / "bench" / "scaling.py")
bench_scaling = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_scaling)  # (it imports bench/data/ladders/ladders.py as a package module)
from bench.data.ladders import ladders  # noqa: E402


@pytest.mark.parametrize("name", list(ladders.LADDERS))
def test_every_ladder_loads_with_rungs_and_larger_held_out_runs(name):
    d = ladders.load(name)
    h = d["heldout"]
    assert (~h).sum() >= 31 and 3 <= h.sum() <= 14
    for k in ("N", "D", "C", "L"):
        assert d[k].shape == h.shape and np.all(np.isfinite(d[k])) and np.all(d[k] > 0)
    assert np.all((d["L"] > 1.5) & (d["L"] < 7))                         # nats per token
    assert np.allclose(d["C"], 6 * d["N"] * d["D"], rtol=1e-9)
    if name.startswith("gadre2024"):
        assert d["N"][h].min() > 3 * d["N"][~h].max()                    # 1.4B and 6.9B vs at most 412M
        assert sorted(set(d["N"][h])) == [1439795200, 6889410560]
    else:
        assert d["C"][h].min() > d["C"][~h].max()


def test_values_are_the_source_files():
    """Spot checks against mlfoundations/scaling exp_data/models/*.json (c4_val loss) and Epoch's CSV."""
    rpj = ladders.load("gadre2024_rpj")
    i = int(np.flatnonzero(rpj["N"] == 6889410560)[0])
    assert rpj["D"][i] == 137788211200 and rpj["L"][i] == 2.424993099368689
    c4 = ladders.load("gadre2024_c4")
    assert (~c4["heldout"]).sum() == 31 and c4["L"][0] == 5.974923739894816   # d=96 at 0.25×, the first rung
    chin = ladders.load("chinchilla_hoffmann2022")
    assert len(chin["L"]) == 245 and chin["heldout"].sum() == 14


@pytest.mark.parametrize("name", list(ladders.HELDOUT))
def test_every_held_out_ladder_loads_with_its_held_out_runs_past_the_fitted_ones(name):
    """Reading only (no fit): each held-out file parses, and its held-out runs go past the fitted ones in size or
    compute, as bench/data/heldout/README.md says (the second set: the 1e21 runs; Gemstones' ~2B shapes)."""
    d = ladders.load(name)
    h = d["heldout"]
    few = {"heldout/ladders4": 5, "heldout/ladders5": 20, "heldout/ladders6": 22, "heldout/ladders7": 34}
    assert (~h).sum() >= next((k for g, k in few.items() if name in ladders.HELDOUT_SETS[g]), 70)
    assert 1 <= h.sum() <= (36 if name.startswith("xlstm2025_") else 29)
    top = 8.2 if name == "datablations2023_c4" else 7   # its 7M and 14M models at 100M tokens: 8.11, 7.28
    top = 11 if name == "xlstm2025_mlstm_ctx16384" else top   # three held-out runs diverged (up to 10.85), kept
    assert np.all((d["L"] > 0.5) & (d["L"] < top)) and np.allclose(d["C"], 6 * d["N"] * d["D"], rtol=1e-9)
    assert d["C"][h].max() > d["C"][~h].max()
    if name.startswith("l2l_"):
        assert h.sum() == 1 and d["N"][h][0] == 3309980160 and d["C"][h][0] > 20 * d["C"][~h].max()
    if name == "gemstones_mcleish2025":
        assert h.sum() == 29 and d["N"][h].min() > 1.8 * d["N"][~h].max()
    if name.startswith("porian2024_"):   # the two largest budgets: 1.28e19 (6 runs) and 2.56e19 (5)
        assert h.sum() == 11 and (~h).sum() == 77 and d["C"][~h].max() < 1.28e19 * 0.99 <= d["C"][h].min()
    if name in ladders.HELDOUT_SETS["heldout/ladders4"]:  # the five smallest sizes fitted, the rest held out
        assert (~h).sum() == 5 and d["N"][h].min() > d["N"][~h].max()
        assert name != "cerebras2023_gpt_sp" or d["C"][h].max() > 20 * d["C"][~h].max()
    if name in ladders.HELDOUT_SETS["heldout/ladders5"]:  # the paper's ladder fitted; 3B x5, 7B, 13B held out
        assert (~h).sum() == 20 and h.sum() == 7 and d["N"][h].min() > 2 * d["N"][~h].max()
        assert len(set(d["N"][~h])) == 4 and d["C"][h].max() > 200 * d["C"][~h].max()
    if name == "datablations2023_c4":   # single-epoch runs; the four largest sizes (2.8B-8.7B) held out
        assert (~h).sum() == 22 and h.sum() == 6 and d["N"][h].min() >= 2.8e9 > d["N"][~h].max()
    if name == "llama3_2024_isoflop":   # the budgets 3e21 and 1e22 held out, 6e18-1e21 fitted
        assert (~h).sum() == 121 and h.sum() == 12 and d["C"][~h].max() < 1.01e21 < 2.9e21 < d["C"][h].min()
    if name in ladders.HELDOUT_SETS["heldout/ladders7"]:  # each file's largest isoFLOP budget held out, 2.2-3.3x
        rows = {"xlstm2025_llama_ctx2048": (49, 36), "xlstm2025_llama_ctx8192": (82, 27),
                "xlstm2025_llama_ctx16384": (34, 36), "xlstm2025_mlstm_ctx16384": (52, 32)}
        assert ((~h).sum(), h.sum()) == rows[name] and 2.2 * d["C"][~h].max() < d["C"][h].min()


def test_a_bad_ladder_file_is_refused_naming_the_column(tmp_path, monkeypatch):
    (tmp_path / "ladders").mkdir()
    (tmp_path / "ladders" / "gadre2024_c4.csv").write_text("run,N,D,multiplier,L,split\na,1e7,2e8,1,n/a,fit\n")
    monkeypatch.setattr(sys.modules[ladders.load.__module__], "DATA", tmp_path)  # bench/data/ladders/ladders.py
    with pytest.raises(ValueError, match="column 'L'"):
        ladders.load("gadre2024_c4")
    (tmp_path / "ladders" / "gadre2024_c4.csv").write_text("run,N,D,multiplier,L,split\na,1e7,2e8,1,3.2,train\n")
    with pytest.raises(ValueError, match="split must be fit or heldout"):
        ladders.load("gadre2024_c4")


def test_the_evaluation_reports_error_and_coverage_per_law():
    out = bench_scaling.evaluate(scaling, "gadre2024_rw", laws=("compute",), bootstrap=8)
    row = out["laws"]["compute"]
    assert out["rungs"] == 32 and out["heldout"] == 3 and out["compute_ratio"] > 1
    assert 0 <= row["mean_rel_error"] <= row["max_rel_error"] < 0.2 and 0 <= row["coverage"] <= 1
    assert row["band_width"] > 0
    assert len(row["predicted"]) == len(row["low"]) == len(row["high"]) == 3
    rel = np.abs(np.array(row["predicted"]) / np.array(row["actual"]) - 1)
    assert row["mean_rel_error"] == pytest.approx(rel.mean())


def test_the_monotone_candidate_drops_only_fitted_rows_a_smaller_cheaper_row_beats():
    """bench/scaling_cv.py `monotone` (the candidate registered for the sixth set): a fitted row is dropped when
    another fitted row has N and D no larger (not both equal) and a lower loss; held-out rows and repeats stay."""
    from bench import scaling_cv
    d = {"N": np.array([1e8, 2e8, 4e8, 4e8, 8e8, 1.6e9]), "D": np.array([2e9, 2e9, 2e9, 2e9, 2e9, 2e9]),
         "L": np.array([3.0, 2.8, 2.9, 2.95, 2.6, 3.5]),
         "heldout": np.array([False, False, False, False, False, True]), "file": "x"}
    kept, dropped = scaling_cv.monotone(d)
    assert dropped == 2 and kept["L"].tolist() == [3.0, 2.8, 2.6, 3.5] and kept["heldout"].sum() == 1
    assert kept["file"] == "x" and scaling_cv.monotone({**d, "L": np.array([3.0, 2.8, 2.7, 2.7, 2.6, 3.5])})[1] == 0
    dedup = ladders.load("pythia2023_pile_dedup")   # development data now: its 1.4B rung (1.889) above its 1B's
    kept, dropped = scaling_cv.monotone(dedup)
    assert dropped == 1 and 1.4e9 not in kept["N"] and kept["heldout"].sum() == dedup["heldout"].sum()


def test_the_sixth_sets_extractor_rebuilds_its_files_byte_for_byte():
    """bench/data/heldout/extract_heldout6.py from the two sources' snapshots (git mirrors; skipped where this machine
    has none: OBS_MIRRORS names their folder, <owner>+<name>/repo inside), rendered as write_ladder writes them."""
    import csv
    import io
    import os
    mirrors = Path(os.environ.get("OBS_MIRRORS", "/work/.mirror"))
    repos = [mirrors / f"{r}/repo" for r in ("huggingface+datablations", "eric-czech+llama3_isoflop_extraction")]
    if not all(r.is_dir() for r in repos):
        pytest.skip("no snapshots of the sixth set's sources here")
    spec = importlib.util.spec_from_file_location("extract_heldout6",
                                                  ROOT / "bench/data/heldout/extract_heldout6.py")
    ex = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ex)
    built = {"datablations2023_c4": ex.datablations(repos[0]), "llama3_2024_isoflop": ex.llama3(repos[1])}
    for name, rows in built.items():
        buf = io.StringIO()
        w = csv.DictWriter(buf, ["run", "N", "D", "L", "split"], lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
        assert buf.getvalue().encode() == (ROOT / f"bench/data/heldout/ladders6/{name}.csv").read_bytes()


def test_the_seventh_sets_extractor_rebuilds_its_files_byte_for_byte(tmp_path):
    """bench/data/heldout/extract_heldout7.py from the source's snapshot (a git mirror; skipped where this machine has
    none: OBS_MIRRORS names their folder, <owner>+<name>/repo inside) and a Python with pandas (the source pickles
    DataFrames: this one if it has pandas, else OBS_PANDAS_PYTHON), rendered as write_ladder writes them."""
    import os
    import subprocess
    repo = Path(os.environ.get("OBS_MIRRORS", "/work/.mirror")) / "NX-AI+xlstm_scaling_laws/repo"
    if not repo.is_dir():
        pytest.skip("no snapshot of the seventh set's source here")
    python = sys.executable if importlib.util.find_spec("pandas") else os.environ.get("OBS_PANDAS_PYTHON")
    if not python:
        pytest.skip("no Python with pandas (OBS_PANDAS_PYTHON) to read the source's pickles")
    script = f"""
import csv, io, sys
sys.path.insert(0, {str(ROOT / 'bench/data/heldout')!r})
import extract_heldout7 as ex
for path, name in ex.FILES.items():
    buf = io.StringIO()
    w = csv.DictWriter(buf, ["run", "N", "D", "L", "split"], lineterminator="\\n")
    w.writeheader()
    w.writerows(ex.ladder(ex.Path({str(repo)!r}), path, name))
    open({str(tmp_path)!r} + "/" + name + ".csv", "w", encoding="utf-8", newline="").write(buf.getvalue())
"""
    subprocess.run([python, "-c", script], check=True, cwd=ROOT)
    for name in ("xlstm2025_llama_ctx2048", "xlstm2025_llama_ctx8192", "xlstm2025_llama_ctx16384",
                 "xlstm2025_mlstm_ctx16384"):
        assert (tmp_path / f"{name}.csv").read_bytes() == \
            (ROOT / f"bench/data/heldout/ladders7/{name}.csv").read_bytes()
