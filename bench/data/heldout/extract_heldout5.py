"""Rebuild bench/data/heldout/ladders5/ (README.md beside this, "The fifth set"; issue 48): `--olmo-ladder DIR`, a
checkout or mirror of github.com/allenai/OLMo-ladder. Per run file, its last row as the source's reader takes it
(src/scaling/utils.py): L the C4 loss, D `throughput/total_tokens` (else `_step` × `batch_size_in_tokens`), N the
source's MODEL_PARAMS; a ladder run must reach its planned length (20·N per xC) to 1%. 190M-1B fitted."""

import argparse
import csv
import io
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from extract import show, write_ladder  # noqa: E402 (bench/data/extract.py)

COMMIT, RUNS = "67a3f440f787d020da35e3ca8eeae475fae754f5", "src/scripts/paper/data/ladder-runs/"
PARAMS = {"190M": 190354176, "370M": 371262464, "760M": 758220288, "1B": 1279395840, "3B": 3169537280,
          "7B": 6887575552, "13B": 13202396160}   # src/ladder/ladder.py MODEL_PARAMS
LENGTHS = {"0.5xC": 10, "1xC": 20, "2xC": 40, "5xC": 100, "10xC": 200}  # tokens per parameter (parse_length)
TARGETS = {"7B": ("7B-4T", "peteish7_eval_anneal.csv"), "13B": ("13B-5T", "peteish13_eval_final.csv")}


def build(repo: Path) -> None:
    out = []
    for size, n in PARAMS.items():
        runs = [TARGETS[size] + (None,)] if size in TARGETS else [(f"{size}-{k}", f"{size}-{k}.csv", v * n)
                                                                  for k, v in LENGTHS.items()]
        for run, name, planned in runs:
            row = list(csv.DictReader(io.StringIO(show(repo, COMMIT, RUNS + name))))[-1]
            d = row.get("throughput/total_tokens") or str(int(row["_step"]) * int(row["batch_size_in_tokens"]))
            if planned is not None and abs(float(d) / planned - 1) > 0.01:
                raise SystemExit(f"{name}: {d} tokens, not its planned length")
            out.append({"run": f"olmo_ladder2024_c4-{run}", "N": repr(float(n)), "D": repr(float(d)),
                        "L": repr(float(row["eval/c4_en-validation/CrossEntropyLoss"])),
                        "split": "fit" if size in ("190M", "370M", "760M", "1B") else "heldout"})
    write_ladder("olmo_ladder2024_c4", out, "ladders5")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--olmo-ladder", type=Path, required=True)
    build(ap.parse_args().olmo_ladder)
