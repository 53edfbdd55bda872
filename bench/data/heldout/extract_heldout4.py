"""Rebuild the fourth set of held-out ladders, bench/data/heldout/ladders4/ (README.md beside this, issue 48).

    .venv/bin/python bench/data/heldout/extract_heldout4.py --modelzoo DIR --pythia DIR

DIR: git checkouts (or bare mirrors) of github.com/Cerebras/modelzoo (commit c1ef453dd85f, the last that holds
modelzoo/transformers/pytorch/gpt3/configs/Cerebras_GPT/README.md; its tables are the same in every earlier
version back to b353ab5) and github.com/EleutherAI/pythia (commit a19eecb807ec, README.md). Read with
`git show <commit>:<path>`. Every number written is the source's own text, converted to a float (a row chosen, a
column renamed; never a value computed): L is the README's "PILE test xent" (Cerebras' own evaluation of its own
models and of Pythia's public checkpoints, nats per token of each model's tokenizer), N the table's "Count"
(the nominal size, 111M -> 1.11e8), D the Cerebras training table's "Tokens" (Cerebras-GPT) or Pythia's README
"299,892,736,000" tokens (every Pythia model). C is 6·N·D, as everywhere (the README's "Training FLOPs" count
attention and embeddings and is not used).
Which rows are held out is fixed here, before any fit ran on these files: on every ladder the five smallest sizes
are fitted and the rest held out (Cerebras-GPT: 6.7B and 13B, 6.2x and 23x the compute of the largest fitted
rung; Pythia: 2.8B, 6.9B, 12B, 2x to 8.6x). Cerebras-GPT muP (five sizes) is left out: nothing left to hold out.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/data: the other sets' extractor
from extract import show, write_ladder  # noqa: E402

MODELZOO = ("c1ef453dd85fd8c4689c4f0c635ee88300514471",
            "modelzoo/transformers/pytorch/gpt3/configs/Cerebras_GPT/README.md")
PYTHIA = ("a19eecb807ec2c79a39ebf18108816e6ffffc1d5", "README.md")
PYTHIA_TOKENS = "299,892,736,000"
LADDERS = {"Cerebras": "cerebras2023_gpt_sp", "Pythia": "pythia2023_pile", "Pythia deduped": "pythia2023_pile_dedup"}
FITTED = 5  # the five smallest sizes of each ladder are fitted, the rest held out
_UNIT = {"M": 1e6, "B": 1e9}


def _size(text: str) -> float:
    return float(text[:-1]) * _UNIT[text[-1]]


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _zero_shot(readme: str) -> dict[str, list[tuple[str, str]]]:
    """Family -> [(Count, PILE test xent)] from the README's "0-shot Evaluation" table (a blank family cell
    continues the family above)."""
    lines = readme.splitlines()
    start = next(i for i, s in enumerate(lines) if s.strip() == "#### 0-shot Evaluation") + 1
    head = _cells(lines[start])
    if head[:4] != ["Model", "Count", "Training FLOPs", "PILE test xent"]:
        raise SystemExit(f"unexpected 0-shot table header {head}")
    out: dict[str, list[tuple[str, str]]] = {}
    family = ""
    for s in lines[start + 2:]:
        if not s.startswith("|"):
            break
        c = _cells(s)
        family = c[0] or family
        out.setdefault(family, []).append((c[1], c[3]))
    return out


def _cerebras_tokens(readme: str) -> dict[str, str]:
    """Model Params -> Tokens from the README's training table."""
    lines = readme.splitlines()
    start = next(i for i, s in enumerate(lines) if s.startswith("Model Params | Sequence Length"))
    if _cells(lines[start])[4] != "Tokens":
        raise SystemExit("unexpected training table header")
    out = {}
    for s in lines[start + 2:]:
        if "|" not in s:
            break
        c = _cells(s)
        out[c[0]] = c[4]
    return out


def build(modelzoo: Path, pythia: Path) -> None:
    readme = show(modelzoo, *MODELZOO)
    table, tokens = _zero_shot(readme), _cerebras_tokens(readme)
    if PYTHIA_TOKENS not in show(pythia, *PYTHIA):
        raise SystemExit(f"Pythia's README no longer says {PYTHIA_TOKENS} tokens")
    for family, name in LADDERS.items():
        rows = table[family]
        if [_size(n) for n, _ in rows] != sorted(_size(n) for n, _ in rows) or len(rows) <= FITTED:
            raise SystemExit(f"{family}: sizes not in increasing order or too few ({len(rows)})")
        out = []
        for i, (count, xent) in enumerate(rows):
            d = tokens[count] if family == "Cerebras" else PYTHIA_TOKENS.replace(",", "")
            out.append({"run": f"{name}-{count}", "N": repr(_size(count)), "D": repr(float(d)),
                        "L": repr(float(xent)), "split": "fit" if i < FITTED else "heldout"})
        write_ladder(name, out, "ladders4")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modelzoo", type=Path, required=True, help="Cerebras/modelzoo checkout or mirror")
    ap.add_argument("--pythia", type=Path, required=True, help="EleutherAI/pythia checkout or mirror")
    a = ap.parse_args()
    build(a.modelzoo, a.pythia)
    return 0


if __name__ == "__main__":
    sys.exit(main())
