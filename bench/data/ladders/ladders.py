"""The scaling ladders' data (bench/data/ladders/README.md, bench/data/heldout/README.md): each ladder's file,
columns and held-out rule, and `load(name)`, which reads one (data, not a bench)."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parent.parent  # bench/data
CHINCHILLA_HELDOUT_C = 2e21   # Hoffmann et al.'s largest isoFLOP profile (~3e21) and their 1.3e22 run

NDL = {"N": "N", "D": "D", "L": "L"}
# name: (file, columns, how the held-out runs are chosen)
LADDERS = {"chinchilla_hoffmann2022": ("scaling/chinchilla_svg_extracted_data.csv",
                                       {"N": "Model Size", "C": "Training FLOP", "L": "loss"}, "C >= 2e21"),
           **{f"gadre2024_{s}": (f"ladders/gadre2024_{s}.csv", NDL, "split") for s in ("c4", "rpj", "rw")}}
# Frozen before tuning, scored only through bench/scaling_cv.py (each file verified first): `heldout/ladders`
# (frozen in d780ded; seen while the band rule was settled), `heldout/ladders2` (cc9b83b, before any fit; scored
# once in 8827984: spent), `heldout/ladders3` (f5fc276, before any fit and the size-fold rule; scored once: spent),
# `heldout/ladders4` (82a5e37, before any fit; scored once in 09d1dea: spent), `heldout/ladders5` (2afd90d, before
# any fit; scored once in 7e00054: spent), `heldout/ladders6` (c266349, before any fit; scored once in 607c863:
# spent), `heldout/ladders7` (7927a8e, before any fit; scored once in 606c3cb: spent).
HELDOUT_SETS = {
    "heldout/ladders": ("misfitting_li2025", "marin2026_comma", "marin2026_dclm", "marin2026_nemotron"),
    "heldout/ladders2": ("l2l_fineweb", "l2l_fineweb_edu", "l2l_proof_pile_2", "l2l_slimpajama", "l2l_smollm",
                         "l2l_starcoder", "gemstones_mcleish2025"),
    "heldout/ladders3": ("porian2024_rw_cosine", "porian2024_owt2_cosine"),
    "heldout/ladders4": ("cerebras2023_gpt_sp", "pythia2023_pile", "pythia2023_pile_dedup"),
    "heldout/ladders5": ("olmo_ladder2024_c4",),
    "heldout/ladders6": ("datablations2023_c4", "llama3_2024_isoflop"),
    "heldout/ladders7": ("xlstm2025_llama_ctx2048", "xlstm2025_llama_ctx8192", "xlstm2025_llama_ctx16384",
                         "xlstm2025_mlstm_ctx16384"),
}
HELDOUT = {name: (f"{folder}/{name}.csv", NDL, "split")
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
