"""Rebuild the second set of held-out ladders, bench/data/heldout/ladders2/ (README.md beside this, issue 48).

    .venv/bin/python bench/data/heldout/extract_heldout2.py --loss-to-loss DIR --gemstones DIR

DIR: git checkouts (or bare mirrors) of github.com/KempnerInstitute/loss-to-loss-notebooks (commit 457ce81a0190)
and github.com/mcleish7/gemstone-scaling-laws (commit 5f420478f605). Files are read with `git show <commit>:<path>`;
every number written is the source's own text (a row chosen, a column renamed, never a value computed). Which rows
are held out is fixed here, before any fit ran on these files: the source's own extrapolation runs
(loss-to-loss), and the largest model sizes (Gemstones).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from pathlib import Path

from extract_heldout import show, write_ladder  # (this folder: the first set's extractor)

HERE = Path(__file__).resolve().parent
LOSS_TO_LOSS = ("457ce81a019019bc3981937c20a70c52f5fad436", "data/sweep.csv", "data/extrapolation.csv")
GEMSTONES = ("5f420478f6057b0cbb4d13405fb10ca64675bccb", "wandb_dfs/wandb_df_for_fitting_cool_end.jsonl")
# the training set (the source's `data`) -> the ladder's name; L is the source's `val_loss`, which is the run's
# loss on that set's own validation split (utils_plotting.val_map in the source; checked per row below)
L2L_DATA = {
    "fineweb-100b": ("l2l_fineweb", "eval/fineweb_100b_val/CrossEntropyLoss"),
    "fineweb-edu-100b": ("l2l_fineweb_edu", "eval/fineweb_edu_100b_val/CrossEntropyLoss"),
    "proof-pile-2": ("l2l_proof_pile_2", "eval/proof_pile_2_val/CrossEntropyLoss"),
    "slimpajama-chunk1": ("l2l_slimpajama", "eval/slimpajama_val/CrossEntropyLoss"),
    "smollm-corpus": ("l2l_smollm", "eval/smollm_val/CrossEntropyLoss"),
    "starcoder": ("l2l_starcoder", "eval/starcoder_val/CrossEntropyLoss"),
}
GEMSTONES_HELDOUT = {"PyGemma-2048x27_pretrain", "PyGemma-1536x50_pretrain", "PyGemma-3072x12_pretrain"}  # ~1.9-2.0B


def loss_to_loss(repo: Path) -> None:
    """Brandfonbrener et al. 2024: every run of `sweep.csv` (isoFLOP budgets 2e17-4.84e19) is fitted, the 3.3B run of
    `extrapolation.csv` (1e21) on the same training set is held out. N = `params`, D = `tokens`, L = `val_loss`."""
    commit, sweep, extrap = LOSS_TO_LOSS
    ladders: dict[str, list[dict]] = {name: [] for name, _ in L2L_DATA.values()}
    for path, split in ((sweep, "fit"), (extrap, "heldout")):
        for r in csv.DictReader(io.StringIO(show(repo, commit, path))):
            name, col = L2L_DATA[r["data"]]
            if r["state"] != "finished" or r["val_loss"] != r[col]:
                raise SystemExit(f"{path} {r['name']}: state {r['state']}, val_loss {r['val_loss']} vs {col} {r[col]}")
            ladders[name].append({"run": f"{r['name']}-{r['data']}-iso{r['iso_flop']}", "N": r["params"],
                                  "D": r["tokens"], "L": r["val_loss"], "split": split})
    for name, rows in ladders.items():
        write_ladder(name, rows, "ladders2")


def gemstones(repo: Path) -> None:
    """McLeish et al. 2025: every row of the cooldown-end table (each a run cooled down at one of ten points,
    11-110B tokens); the three ~2B models held out. N = `params_active_precise`, D = `tokens`, L = `final_loss`
    (the validation loss at the end of the cooldown, per the source's wandb_data_extraction.py)."""
    commit, path = GEMSTONES
    rows = []
    for line in show(repo, commit, path).splitlines():
        r = json.loads(line, parse_float=str, parse_int=str)   # the source's text, not a re-printed float
        rows.append({"run": f"{r['run_name']}-step{r['step']}", "N": r["params_active_precise"], "D": r["tokens"],
                     "L": r["final_loss"], "split": "heldout" if r["run_name"] in GEMSTONES_HELDOUT else "fit"})
    write_ladder("gemstones_mcleish2025", rows, "ladders2")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loss-to-loss", type=Path, required=True, help="loss-to-loss-notebooks checkout")
    ap.add_argument("--gemstones", type=Path, required=True, help="gemstone-scaling-laws checkout")
    args = ap.parse_args()
    loss_to_loss(args.loss_to_loss)
    gemstones(args.gemstones)
    return 0


if __name__ == "__main__":
    sys.exit(main())
