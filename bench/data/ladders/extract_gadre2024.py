"""Rebuild gadre2024_*.csv from a clone of github.com/mlfoundations/scaling (exp_data/models/*.json).

    python bench/data/ladders/extract_gadre2024.py /path/to/mlfoundations/scaling

One row per run: N = hyperparameters.params, D = hyperparameters.tokens, L = the `loss` of the results entry
whose val_data is the C4 validation set (training/eval_data/c4_val/...), the loss the paper fits ("C4 eval").
split = heldout for the 1.4B and 6.9B runs (open_lm_1b, open_lm_7b), fit for the 10M-411M grid.
"""

import csv
import json
import sys
from pathlib import Path

DATASETS = {"c4_original": "c4", "rpj": "rpj", "rw_original": "rw"}


def main(repo: str) -> None:
    rows = {short: [] for short in DATASETS.values()}
    for path in sorted(Path(repo, "exp_data", "models").glob("*.json")):
        run = json.loads(path.read_text())
        hp = run["hyperparameters"]
        (c4,) = [r["loss"] for r in run["results"] if "c4_val" in r["val_data"][0]]
        split = "heldout" if "open_lm_" in run["name"] else "fit"
        rows[DATASETS[run["dataset_name"]]].append(
            (run["name"], hp["params"], hp["tokens"], hp["chinchilla_multiplier"], repr(c4), split))
    out = Path(__file__).resolve().parent
    for short, rs in rows.items():
        rs.sort(key=lambda r: (r[5] == "heldout", r[1], r[2]))
        with open(out / f"gadre2024_{short}.csv", "w", newline="") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(["run", "N", "D", "multiplier", "L", "split"])
            w.writerows(rs)


if __name__ == "__main__":
    main(sys.argv[1])
