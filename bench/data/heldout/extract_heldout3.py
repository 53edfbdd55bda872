"""Rebuild the third set of held-out ladders, bench/data/heldout/ladders3/ (README.md beside this, issue 48).

    PY -m pip install pandas   # a scratch environment: the source's tables are pickled pandas DataFrames
    PY bench/data/heldout/extract_heldout3.py --porian DIR

DIR: a git checkout (or bare mirror) of github.com/formll/resolving-scaling-law-discrepancies (commit 0dc60d91b8a5).
The tables are read with `git show <commit>:<path>` and unpickled by an unpickler that admits only pandas, numpy and
plain builtin types (a pickle can name any callable; anything else is refused). Every number written is the
source's own value (Python's repr of the stored float: a row chosen, a column renamed, never a value computed).
Which rows are held out is fixed here, before any fit ran on these files: every run of the two largest of the
twelve FLOP budgets (1.28e19 and 2.56e19); the ten budgets 1.25e16-6.4e18 are fitted.
"""

from __future__ import annotations

import argparse
import io
import lzma
import math
import pickle
import subprocess
import sys
from pathlib import Path

from extract_heldout import write_ladder  # (this folder: the first set's extractor)

PORIAN = ("0dc60d91b8a525858a3067fc9e4a46ff5374cc6f",
          {"data/summary_df.pickle.xz": "porian2024_rw_cosine",
           "data/summary_df_owt2.pickle.xz": "porian2024_owt2_cosine"})
# the configuration kept (the source's configs.py keys): base hyperparameters, short warmup, cosine decay to each
# budget ("chinchilla"), standard parameter count (6·N FLOPs per token, N with embeddings), validation loss
CONFIG = {"hparams": "base", "warmup": "short", "decay": "chinchilla", "param_count": "standard", "val": "val"}
HELDOUT_FROM = 1.28e19  # budgets held out: the two largest
_ALLOW = {"builtins": {"slice", "range", "complex", "set", "frozenset", "bytearray", "object", "tuple", "list",
                       "dict", "int", "float", "str", "bool"}}


class _Restricted(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        top = module.split(".")[0]
        if top == "builtins" and name not in _ALLOW["builtins"]:
            raise pickle.UnpicklingError(f"refused {module}.{name}")
        if top not in ("builtins", "pandas", "numpy", "collections", "datetime", "copyreg", "_codecs") or \
                name in ("load", "save", "fromfile", "eval", "read_pickle"):
            raise pickle.UnpicklingError(f"refused {module}.{name}")
        return super().find_class(module, name)


def _table(repo: Path, commit: str, path: str):
    blob = subprocess.run(["git", "-C", str(repo), "show", f"{commit}:{path}"], check=True, capture_output=True).stdout
    return _Restricted(io.BytesIO(lzma.decompress(blob))).load()


def porian(repo: Path) -> None:
    """Porian et al. 2024: the isoFLOP runs of the cosine-decay configuration, one ladder per training set
    (RefinedWeb, OpenWebText2). Per budget the source's `orig_n` (N: parameters incl. embeddings, its `params`),
    `orig_t` (D: tokens) and `orig_loss` (L: validation loss); 6·N·D is the budget."""
    commit, files = PORIAN
    for path, name in files.items():
        df = _table(repo, commit, path)
        pick = df
        for k, v in CONFIG.items():
            pick = pick[pick[k] == v]
        if len(pick) != 1:
            raise SystemExit(f"{path}: {len(pick)} rows match {CONFIG}")
        rows = []
        for _, b in pick.iloc[0]["data"].iterrows():
            for n, t, loss in zip(b["orig_n"], b["orig_t"], b["orig_loss"]):
                if not all(math.isfinite(float(x)) for x in (n, t, loss)):
                    raise SystemExit(f"{path}: a non-finite value at budget {b['flops']}")
                if abs(6 * float(n) * float(t) / float(b["flops"]) - 1) > 0.02:
                    raise SystemExit(f"{path}: 6·N·D is not the budget {b['flops']} (N {n}, D {t})")
                rows.append({"run": f"{name}-C{float(b['flops']):.3g}-N{int(round(float(n)))}", "N": repr(float(n)),
                             "D": repr(float(t)), "L": repr(float(loss)),
                             "split": "heldout" if float(b["flops"]) >= HELDOUT_FROM * (1 - 1e-9) else "fit"})
        write_ladder(name, rows, "ladders3")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--porian", type=Path, required=True, help="resolving-scaling-law-discrepancies checkout")
    porian(ap.parse_args().porian)
    return 0


if __name__ == "__main__":
    sys.exit(main())
