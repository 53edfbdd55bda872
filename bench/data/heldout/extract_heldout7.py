"""Rebuild the seventh set of held-out ladders, bench/data/heldout/ladders7/ (README.md beside this, issue 48).

    PY bench/data/heldout/extract_heldout7.py --xlstm DIR      (PY: an environment with pandas: pickled DataFrames)

DIR: a git checkout (or bare mirror) of github.com/NX-AI/xlstm_scaling_laws (commit 604bb3062d3a, data/*.pkl).
Read with `git show <commit>:<path>`, unpickled by a restricted unpickler (pandas, numpy and builtin types; the
source's WandBRunData records become plain attribute holders); nothing is fitted here.

xLSTM scaling laws (Beck, Schweighofer, Böck, Lehner & Hochreiter 2025, arXiv:2510.02228): the IsoFLOP runs the
source's `create_combined_isoflop_data_table` names (`analysis/isoflop/data.py`), those of the six files the
snapshot holds: Llama (dense Transformer) at context 2048, 8192 and 16384, and mLSTM (xLSTM) at 16384 (mLSTM at
2048 and 8192 are over the snapshot's size limit, absent). One row per W&B run (the source's `group_runs_by="none"`),
read as the source's `RunData` reads it: N = summary `model/` `num_params`, D = global batch size × context length
× `num_train_steps` (its `num_tokens_training`), L = the last logged `val/.dclm_loss` (its `final_value_of_log`,
DCLM validation loss). Kept: the runs that finished (a summary with N, and the validation loss logged at the planned
last step, finite). Held out, the rule fixed here before any fit: in each file, every kept run of its largest budget
(the source's run tag whose runs have the largest median 6·N·D).
"""

from __future__ import annotations

import argparse
import io
import math
import pickle
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/data: the other sets' extractor
from extract import _Restricted, show, write_ladder  # noqa: E402

XLSTM = "604bb3062d3a7681bb33e467108cb0a6f81267fc"
FILES = {"data/isoflop_llama_ctx2048_wandb_data.pkl": "xlstm2025_llama_ctx2048",
         "data/isoflop_llama_ctx8192_wandb_data.pkl": "xlstm2025_llama_ctx8192",
         "data/isoflop_llama_ctx16384_wandb_data.pkl": "xlstm2025_llama_ctx16384",
         "data/isoflop_mlstm_ctx16384_wandb_data.pkl": "xlstm2025_mlstm_ctx16384"}
VAL = "val/.dclm_loss"


class _Record:
    """The source's WandBRunData (a dataclass), as attributes only: no code of the source runs."""

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)


class _Unpickler(_Restricted):
    def find_class(self, module: str, name: str):
        if module.endswith(".common.wandb_run_data") and name == "WandBRunData":
            return _Record
        return super().find_class(module, name)


def _context(run: _Record) -> int:
    """The source's get_context_length: the config's, else the run name's `ctx<n>_`."""
    ctx = (run.config or {}).get("model.model_config.context_length")
    return int(ctx) if ctx is not None else int(run.name.split("ctx")[1].split("_")[0])


def _row(run: _Record) -> tuple[float, float, float] | None:
    summary = run.summary or {}
    if "num_params" not in summary.get("model/", {}) or "num_train_steps" not in summary.get("dataset/", {}):
        return None                                         # no summary: the run never reported its size
    steps = int(summary["dataset/"]["num_train_steps"])
    val = (run.logs or {}).get(VAL)
    if val is None or not len(val) or int(val["_step"].iloc[-1]) != steps:
        return None                                         # not finished: no validation loss at the last step
    loss = float(val[VAL].iloc[-1])
    if not math.isfinite(loss):
        return None
    n = float(summary["model/"]["num_params"])
    return n, float(summary["dataset/"]["global_batch_size"]) * _context(run) * steps, loss


def ladder(repo: Path, path: str, name: str) -> list[dict]:
    runs = _Unpickler(io.BytesIO(show(repo, XLSTM, path, text=False))).load()
    kept = {tag: [(r, x) for r in rs if (x := _row(r)) is not None] for tag, rs in runs.items()}
    budget = {tag: statistics.median(6 * n * d for _, (n, d, _) in xs) for tag, xs in kept.items() if xs}
    held = max(budget, key=budget.get)
    rows = [{"run": f"{name}-{r.name}-{r.id}", "N": repr(n), "D": repr(d), "L": repr(loss),
             "split": "heldout" if tag == held else "fit"}
            for tag, xs in kept.items() for r, (n, d, loss) in xs]
    return sorted(rows, key=lambda r: (r["split"], float(r["N"]) * float(r["D"]), float(r["N"]), r["run"]))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--xlstm", type=Path, required=True, help="checkout or mirror of NX-AI/xlstm_scaling_laws")
    args = ap.parse_args()
    for path, name in FILES.items():
        write_ladder(name, ladder(args.xlstm, path, name), "ladders7")
