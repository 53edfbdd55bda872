"""Rebuild the sixth set of held-out ladders, bench/data/heldout/ladders6/ (README.md beside this, issue 48).

    .venv/bin/python bench/data/heldout/extract_heldout6.py --datablations DIR --llama3 DIR

DIR: git checkouts (or bare mirrors) of github.com/huggingface/datablations (commit 13701315b163,
utils/parametric_fit.ipynb) and github.com/eric-czech/llama3_isoflop_extraction (commit 1bc1755b76e6,
isoflops_points.csv). Read with `git show <commit>:<path>`; nothing is fitted here.

datablations (Muennighoff et al. 2023, "Scaling Data-Constrained Language Models"): the notebook's last data
cell (`NAMES_TO_VAL_LOSSES`, the final C4 validation losses the authors read from each model's TensorBoard log,
with its `PARAMS_MAP` and `TOKENS_MAP`). A run name is <params><tokens><unique tokens>; the params prefix is the
shortest one `PARAMS_MAP` holds (the notebook's own `get_params`), tokens are read as its `get_tokens` reads them.
Kept: the single-epoch runs (tokens == unique tokens, the rest of the name a doubled string; no repeated data, no
suffixed variant such as dedup or seeds) with a loss (0 marks a run that had not finished). Held out, the rule
fixed here before any fit: the four largest sizes (2.8B, 3.9B, 4.2B, 8.7B parameters), every run of them.

Llama 3 (Llama Team, Meta 2024, "The Llama 3 Herd of Models", Figure 2, the isoFLOP curves): the points of the
figure as extracted from its vector (SVG) source by the repository above: compute_budget C, training_tokens D,
validation_loss L. N = C / (6·D) (the figure gives C and D, not N; as the Chinchilla loader of bench/data/ladders
does). Held out, the rule fixed here: the two largest budgets (3e21, 1e22), fitted 6e18-1e21.
"""

from __future__ import annotations

import argparse
import ast
import csv
import io
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/data: the other sets' extractor
from extract import show, write_ladder  # noqa: E402

DATABLATIONS = ("13701315b163f1c54642b94ad237b2699187c3ee", "utils/parametric_fit.ipynb")
LLAMA3 = ("1bc1755b76e6ee55a911549c8ec52b71cb480320", "isoflops_points.csv")
DATABLATIONS_HELDOUT_FROM = 2.8e9   # parameters: 2.8B, 3.9B, 4.2B and 8.7B held out
LLAMA3_HELDOUT_FROM = 3e21          # FLOPs: the budgets 3e21 and 1e22 held out


def _dict_literal(source: str, name: str) -> dict:
    """The dict literal assigned to `name` in a notebook cell (read with ast.literal_eval, never executed)."""
    start = source.index(name + " = {") + len(name) + 3
    end = source.index("\n}", start) + 2
    return ast.literal_eval(source[start:end])


def _tokens(text: str, tokens_map: dict) -> float:
    """The notebook's get_tokens: TOKENS_MAP's billions, else "26b" -> 26, "1b5" -> 1.5 (billions)."""
    if text in tokens_map:
        return float(tokens_map[text]) * 1e9
    if "m" in text or text.count("b") != 1:
        raise SystemExit(f"datablations: token count {text!r} not readable")
    return float(text.replace("b", ".").strip(".")) * 1e9


def datablations(repo: Path) -> list[dict]:
    cells = json.loads(show(repo, *DATABLATIONS))["cells"]
    data = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"
            and "NAMES_TO_VAL_LOSSES = {" in "".join(c["source"])][-1]
    losses, params, tokens_map = (_dict_literal(data, k) for k in ("NAMES_TO_VAL_LOSSES", "PARAMS_MAP", "TOKENS_MAP"))
    out = []
    for name, loss in losses.items():
        prefix = next((name[:i] for i in range(2, len(name)) if name[:i] in params), None)
        rest = name[len(prefix):] if prefix else ""
        half = rest[:len(rest) // 2]
        if loss == 0 or not half or rest != half + half:
            continue                                   # repeated data, a suffixed variant, or not finished
        n, d = float(params[prefix]), _tokens(half, tokens_map)
        out.append({"run": f"datablations2023_c4-{name}", "N": repr(n), "D": repr(d), "L": repr(float(loss)),
                    "split": "heldout" if n >= DATABLATIONS_HELDOUT_FROM else "fit"})
    return sorted(out, key=lambda r: (float(r["N"]), float(r["D"])))


def llama3(repo: Path) -> list[dict]:
    out = []
    for row in csv.DictReader(io.StringIO(show(repo, *LLAMA3))):
        c, d = float(row["compute_budget"]), float(row["training_tokens"])
        out.append({"run": f"llama3_2024_isoflop-{row['compute_budget']}-{row['training_tokens']}",
                    "N": repr(c / (6 * d)), "D": repr(d), "L": repr(float(row["validation_loss"])),
                    "split": "heldout" if c >= LLAMA3_HELDOUT_FROM else "fit"})
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datablations", type=Path, required=True, help="checkout or mirror of huggingface/datablations")
    ap.add_argument("--llama3", type=Path, required=True,
                    help="checkout or mirror of eric-czech/llama3_isoflop_extraction")
    args = ap.parse_args()
    write_ladder("datablations2023_c4", datablations(args.datablations), "ladders6")
    write_ladder("llama3_2024_isoflop", llama3(args.llama3), "ladders6")
