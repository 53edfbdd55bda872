"""Rebuild the fifth set of held-out ladders, bench/data/heldout/ladders5/ (README.md beside this, issue 48).

    .venv/bin/python bench/data/heldout/extract_heldout5.py --olmo-ladder DIR   # github.com/allenai/OLMo-ladder

Bhagia et al. 2024's ladder (src/scripts/paper/data/ladder-runs/, commit 67a3f440f787): one row per run file
`<size>-<length>.csv` (not the `-rerun` repeats), sizes 190M-3B, lengths 0.5xC-10xC, and the paper's two targets
(its README's `-t 7B-4T`, `-t 13B-5T`; configs/final.json's files). As the source's own reader does
(src/scaling/utils.py `get_step1_data_by_name`, moving_avg 1): the file's last row; L = its
`eval/c4_en-validation/CrossEntropyLoss`, D = its `throughput/total_tokens`, or where the file has none (13B)
`_step` × `batch_size_in_tokens`; N = the source's MODEL_PARAMS (src/ladder/ladder.py). A ladder run must have
reached its planned length (parse_length: 20·N tokens per xC, 10·N for 0.5xC) to 1%. Split, fixed before any fit:
the paper's fitted ladder, 190M-1B (its final.json), fitted; the three largest sizes (3B, 7B, 13B) held out.
"""

from __future__ import annotations

import argparse
import csv
import io
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from extract import show, write_ladder  # noqa: E402 (bench/data/extract.py)

COMMIT = "67a3f440f787d020da35e3ca8eeae475fae754f5"
RUNS = "src/scripts/paper/data/ladder-runs/"
PARAMS = {"190M": 190354176, "370M": 371262464, "760M": 758220288, "1B": 1279395840, "3B": 3169537280,
          "7B": 6887575552, "13B": 13202396160}   # src/ladder/ladder.py MODEL_PARAMS
LENGTHS = {"0.5xC": 10, "1xC": 20, "2xC": 40, "5xC": 100, "10xC": 200}  # tokens per parameter (parse_length)
TARGETS = {"7B-4T": "peteish7_eval_anneal.csv", "13B-5T": "peteish13_eval_final.csv"}
FITTED = ("190M", "370M", "760M", "1B")
LOSS = "eval/c4_en-validation/CrossEntropyLoss"


def _last(repo: Path, name: str) -> tuple[str, str]:
    """(D, L) of the file's last row, as the source's reader takes them (values as the file prints them)."""
    row = list(csv.DictReader(io.StringIO(show(repo, COMMIT, RUNS + name))))[-1]
    tokens = row.get("throughput/total_tokens") or str(int(row["_step"]) * int(row["batch_size_in_tokens"]))
    return tokens, row[LOSS]


def build(repo: Path) -> None:
    out = []
    for size in PARAMS:
        runs = [(f"{size}-{k}", f"{size}-{k}.csv", v) for k, v in LENGTHS.items()] if size in ("190M", "370M",
                "760M", "1B", "3B") else [(k, f, None) for k, f in TARGETS.items() if k.startswith(size + "-")]
        for run, name, per_param in runs:
            d, loss = _last(repo, name)
            if per_param is not None and abs(float(d) / (per_param * PARAMS[size]) - 1) > 0.01:
                raise SystemExit(f"{name}: {d} tokens, not its planned length")
            out.append({"run": f"olmo_ladder2024_c4-{run}", "N": repr(float(PARAMS[size])), "D": repr(float(d)),
                        "L": repr(float(loss)), "split": "fit" if size in FITTED else "heldout"})
    write_ladder("olmo_ladder2024_c4", out, "ladders5")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--olmo-ladder", type=Path, required=True, help="allenai/OLMo-ladder checkout or mirror")
    build(ap.parse_args().olmo_ladder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
