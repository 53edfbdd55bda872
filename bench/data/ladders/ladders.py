"""The scaling ladders' data (bench/data/ladders/README.md, bench/data/heldout/README.md): which file holds each
ladder, its columns and how its held-out runs are chosen, and `load(name)`, which reads one (data, not a bench:
bench/scaling.py and bench/scaling_cv.py measure on them).
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parent.parent  # bench/data
CHINCHILLA_HELDOUT_C = 2e21   # Hoffmann et al.'s largest isoFLOP profile (~3e21) and their 1.3e22 run

LADDERS = {
    # name: (file, columns, how the held-out runs are chosen)
    "chinchilla_hoffmann2022": ("scaling/chinchilla_svg_extracted_data.csv",
                                {"N": "Model Size", "C": "Training FLOP", "L": "loss"}, "C >= 2e21"),
    "gadre2024_c4": ("ladders/gadre2024_c4.csv", {"N": "N", "D": "D", "L": "L"}, "split"),
    "gadre2024_rpj": ("ladders/gadre2024_rpj.csv", {"N": "N", "D": "D", "L": "L"}, "split"),
    "gadre2024_rw": ("ladders/gadre2024_rw.csv", {"N": "N", "D": "D", "L": "L"}, "split"),
}
# Frozen before tuning (bench/data/heldout/README.md): scored only through bench/scaling_cv.py, which checks each
# file against bench/data/heldout/MANIFEST.json first.
# Two sets: `heldout/ladders` (frozen in d780ded; its figures were seen while the band rule was settled) and
# `heldout/ladders2` (frozen in cc9b83b, after that rule, before any fit ran on it; scored once in 8827984: spent),
# `heldout/ladders3` (frozen in f5fc276 before any fit ran on it and before the size-fold rule; scored once: spent),
# `heldout/ladders4` (frozen in 82a5e37 before any fit ran on it; scored once in a261116's run: spent).
HELDOUT_SETS = {
    "heldout/ladders": ("misfitting_li2025", "marin2026_comma", "marin2026_dclm", "marin2026_nemotron"),
    "heldout/ladders2": ("l2l_fineweb", "l2l_fineweb_edu", "l2l_proof_pile_2", "l2l_slimpajama", "l2l_smollm",
                         "l2l_starcoder", "gemstones_mcleish2025"),
    "heldout/ladders3": ("porian2024_rw_cosine", "porian2024_owt2_cosine"),
    "heldout/ladders4": ("cerebras2023_gpt_sp", "pythia2023_pile", "pythia2023_pile_dedup"),
}
HELDOUT = {name: (f"{folder}/{name}.csv", {"N": "N", "D": "D", "L": "L"}, "split")
           for folder, names in HELDOUT_SETS.items() for name in names}


def load(name: str) -> dict:
    """{"N", "D", "C", "L": arrays, "heldout": bool array, "file": path}; ValueError naming a bad row."""
    rel, cols, rule = LADDERS[name] if name in LADDERS else HELDOUT[name]
    path = DATA / rel
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise ValueError(f"{path}: no rows")
    out = {}
    for role, col in cols.items():
        try:
            out[role] = np.array([float(r[col]) for r in rows])
        except (KeyError, ValueError) as e:
            raise ValueError(f"{path}: column {col!r}: {e}") from None
        if not (np.all(np.isfinite(out[role])) and np.all(out[role] > 0)):
            raise ValueError(f"{path}: column {col!r} holds a value that is not a positive number")
    if "D" not in out:
        out["D"] = out["C"] / (6 * out["N"])       # as Besiroglu et al. compute tokens from the figure's FLOPs
    out.setdefault("C", 6 * out["N"] * out["D"])
    if rule == "split":
        splits = [r["split"] for r in rows]
        if set(splits) - {"fit", "heldout"}:
            raise ValueError(f"{path}: split must be fit or heldout")
        out["heldout"] = np.array([s == "heldout" for s in splits])
    else:
        out["heldout"] = out["C"] >= CHINCHILLA_HELDOUT_C
    if not out["heldout"].any() or out["heldout"].all():
        raise ValueError(f"{path}: needs both fit and held-out rows")
    out["file"] = str(path.relative_to(DATA.parent.parent))
    return out
