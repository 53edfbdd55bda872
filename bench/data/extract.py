"""Rebuild bench/data's public data sets from git checkouts (or bare mirrors) of their sources. Data, not a bench.

    .venv/bin/python bench/data/extract.py --misfitting DIR --open-athena DIR --only heldout/ladders
    .venv/bin/python bench/data/extract.py --nanogpt DIR --only heldout/anomalies,heldout/anomalies2
    .venv/bin/python bench/data/extract.py --loss-to-loss DIR --gemstones DIR                  # heldout/ladders2
    PY bench/data/extract.py --porian DIR      # heldout/ladders3 (PY: an environment with pandas: pickled DataFrames)
    .venv/bin/python bench/data/extract.py --bigscience DIR --nanogpt DIR --only anomalies/public
    .venv/bin/python bench/data/extract.py --gadre DIR                                           # ladders/gadre2024_*

Each set is written when its sources are given (--only: these sets alone). Files are read with `git show
<commit>:<path>` at the commits pinned here; every number written is the source's own (a row chosen, a column
renamed, never a value computed; C, where absent, is 6·N·D in the benches). Which rows are held out is fixed here,
by the rules of bench/data/heldout/README.md (frozen before tuning), bench/data/ladders/README.md and
bench/data/anomalies/README.md.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import json
import lzma
import math
import pickle
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
HELD = HERE / "heldout"
MISFITTING = ("1f3708c0a12df0effb0ee906b1da5f9f0ff4f4f1", "data/scaling_results_last_ckpt_only.csv")
OPEN_ATHENA = ("3e0656ee3dce1a2c89aa67691920f5eb9d30f0fc", "data/isoflops/extract/marin_202603/raw/isoflop-{}.csv")
NANOGPT = ("f411b3d346aa52d3504324ca93c230fd84c6c07f", {
    "nanogpt-adamw-124M": "records/track_1_short/2024-06-06_AdamW/f66d43d7-e449-4029-8adf-e8537bab49ea.log",
    "nanogpt-muon-124M": "records/track_1_short/2024-10-10_Muon/eb5659d0-fb6a-49e5-a311-f1f89412f726.txt",
    "nanogpt-scaleup-1B": "records/track_1_short/2024-10-20_ScaleUp1B/87bd51fd-6203-4c88-b3aa-8a849a6a83ca.txt",
})
HELDOUT_MODELS = {"misfitting_400m", "misfitting_1b"}    # the two largest sizes of Li et al.'s grid
MARIN_HELDOUT_BUDGET = 1e20                              # Marin's largest isoFLOP budget, by the run name
# The second held-out set of clean curves (frozen after the first had been scored and so become development data):
# every record of records/track_1_short dated FRESH_FROM..FRESH_TO whose first log (by file name) prints the
# training loss at every step, except the three above: the rule, not a choice, names the files.
FRESH_FROM, FRESH_TO = "2024-10-09", "2024-12-04"
LOSS_TO_LOSS = ("457ce81a019019bc3981937c20a70c52f5fad436", "data/sweep.csv", "data/extrapolation.csv")
# the source's `data` -> (the ladder, the column its `val_loss` must equal: utils_plotting.val_map in the source)
L2L_DATA = {d: (f"l2l_{n}", f"eval/{v}_val/CrossEntropyLoss") for d, n, v in (
    ("fineweb-100b", "fineweb", "fineweb_100b"), ("fineweb-edu-100b", "fineweb_edu", "fineweb_edu_100b"),
    ("proof-pile-2", "proof_pile_2", "proof_pile_2"), ("slimpajama-chunk1", "slimpajama", "slimpajama"),
    ("smollm-corpus", "smollm", "smollm"), ("starcoder", "starcoder", "starcoder"))}
GEMSTONES = ("5f420478f6057b0cbb4d13405fb10ca64675bccb", "wandb_dfs/wandb_df_for_fitting_cool_end.jsonl")
GEMSTONES_HELDOUT = {"PyGemma-2048x27_pretrain", "PyGemma-1536x50_pretrain", "PyGemma-3072x12_pretrain"}  # ~1.9-2.0B
PORIAN = ("0dc60d91b8a525858a3067fc9e4a46ff5374cc6f",
          {"data/summary_df.pickle.xz": "porian2024_rw_cosine",
           "data/summary_df_owt2.pickle.xz": "porian2024_owt2_cosine"})
# the configuration kept (the source's configs.py keys): base hyperparameters, short warmup, cosine decay to each
# budget ("chinchilla"), standard parameter count (6·N FLOPs per token, N with embeddings), validation loss
PORIAN_CONFIG = {"hparams": "base", "warmup": "short", "decay": "chinchilla", "param_count": "standard", "val": "val"}
PORIAN_HELDOUT_FROM = 1.28e19  # budgets held out: the two largest of twelve
BIGSCIENCE = "9e64edec2ad1fb9263bf39ba616a84ff64b4d947"
GADRE = ("a003c4913793ac2ae7ef87b28ecb562955d026d5", {"c4_original": "c4", "rpj": "rpj", "rw_original": "rw"})


def show(repo: Path, commit: str, path: str, text: bool = True):
    return subprocess.run(["git", "-C", str(repo), "show", f"{commit}:{path}"], check=True, capture_output=True,
                          text=text).stdout


def ls_tree(repo: Path, commit: str, folder: str) -> list[str]:
    return subprocess.run(["git", "-C", str(repo), "ls-tree", "-r", "--name-only", commit, folder], check=True,
                          capture_output=True, text=True).stdout.split()


def write_ladder(name: str, rows: list[dict], folder: str) -> None:
    (HELD / folder).mkdir(exist_ok=True)
    with open(HELD / folder / f"{name}.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, ["run", "N", "D", "L", "split"], lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    print(f"{name}: {len(rows)} rows, {sum(r['split'] == 'heldout' for r in rows)} held out")


def write_clean_curve(folder: str, name: str, rows: dict) -> None:
    """<name>.csv.gz (step, train/loss, eval/loss), no labels; mtime=0: the same rows give the same bytes."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["step", "train/loss", "eval/loss"])
    for step in sorted(rows):
        w.writerow([step, rows[step].get("train/loss", ""), rows[step].get("eval/loss", "")])
    (HELD / folder).mkdir(exist_ok=True)
    (HELD / folder / f"{name}.csv.gz").write_bytes(gzip.compress(buf.getvalue().encode(), mtime=0))
    (HELD / folder / f"{name}.labels.json").write_text("[]\n")
    print(f"{name}: {len(rows)} logged points")


# ---------------------------------------------------------------------------------------------- heldout/ladders
def misfitting(repo: Path) -> None:
    """Li, Kudugunta & Zettlemoyer 2025: each (model, tokens) run's final checkpoint; of the peak-LR sweep, the
    run with the lowest loss (C4 eval loss, the file's `loss`). N: `N` (all parameters), D: `train_tokens`."""
    best: dict[tuple, dict] = {}
    for r in csv.DictReader(io.StringIO(show(repo, *MISFITTING))):
        if r["portion_steps_elapsed"] != "1.0" or r["loss"] != r["C4 Eval Loss"]:
            raise SystemExit(f"unexpected row {r['model']} {r['train_tokens']}")
        key = (r["model"], int(r["train_tokens"]))
        if key not in best or float(r["loss"]) < float(best[key]["loss"]):
            best[key] = r
    rows = [{"run": f"{m}-{d}-lr{r['peak_lr']}", "N": r["N"], "D": r["train_tokens"], "L": r["loss"],
             "split": "heldout" if m in HELDOUT_MODELS else "fit"}
            for (m, d), r in sorted(best.items(), key=lambda kv: (int(kv[1]["N"]), kv[0][1]))]
    write_ladder("misfitting_li2025", rows, "ladders")


def marin(repo: Path) -> None:
    """Marin's 2026-03 isoFLOP ladders (three training sets): every run, N `parameter_count`, D
    `throughput/total_tokens`, L `eval/paloma/macro_loss`; held out: the runs named with a budget >= 1e+20."""
    for ds in ("comma", "dclm", "nemotron"):
        rows = []
        for r in csv.DictReader(io.StringIO(show(repo, OPEN_ATHENA[0], OPEN_ATHENA[1].format(ds)))):
            m = re.search(r"-(\d+(?:\.\d+)?e[+-]\d+)-", r["Name"] + "-")
            if m is None or not r["eval/paloma/macro_loss"]:
                raise SystemExit(f"marin {ds}: no budget or loss in {r['Name']}")
            held = float(m.group(1)) >= MARIN_HELDOUT_BUDGET
            rows.append({"run": r["Name"], "N": r["parameter_count"], "D": r["throughput/total_tokens"],
                         "L": r["eval/paloma/macro_loss"], "split": "heldout" if held else "fit"})
        rows.sort(key=lambda r: (r["split"], float(r["N"]) * float(r["D"]), r["run"]))
        write_ladder(f"marin2026_{ds}", rows, "ladders")


# ---------------------------------------------------------------------------------------------- heldout/anomalies*
def loss_rows(text: str, norm: bool = False, every: int = 1) -> dict[int, dict]:
    """llm.c's `s:N trl:X lr:Y norm:Z` / `s:N tel:X` or modded-nanogpt's `step:N/M train_loss:X` / `val_loss:X`
    lines -> {step: {metric: the logged text}}; `norm`: the llm.c grad norm too; `every`: only steps it divides."""
    rows: dict[int, dict] = {}
    for line in text.splitlines():
        m = (re.match(r"s:(\d+) (trl|tel):([0-9.]+)(?: lr:[0-9.]+ norm:([0-9.]+))?", line)
             or re.match(r"step:(\d+)/\d+ (train_loss|val_loss):([0-9.]+)()", line))
        if not m or int(m.group(1)) % every:
            continue
        row = rows.setdefault(int(m.group(1)), {})
        row["train/loss" if m.group(2) in ("trl", "train_loss") else "eval/loss"] = m.group(3)
        if norm and m.group(4):
            row["grad/norm/total"] = m.group(4)
    return rows


def nanogpt(repo: Path) -> None:
    for name, path in NANOGPT[1].items():
        write_clean_curve("anomalies", name, loss_rows(show(repo, NANOGPT[0], path)))


def nanogpt_fresh(repo: Path) -> None:
    commit, used, firsts = NANOGPT[0], {p.split("/")[2] for p in NANOGPT[1].values()}, {}
    for path in sorted(p for p in ls_tree(repo, commit, "records/track_1_short/")
                       if p.endswith((".txt", ".log")) and p.count("/") >= 3):
        firsts.setdefault(path.split("/")[2], path)
    for record, path in sorted(firsts.items()):
        if record in used or not FRESH_FROM <= record[:10] <= FRESH_TO:
            continue
        try:
            rows = loss_rows(show(repo, commit, path))
        except subprocess.CalledProcessError:  # listed, but its blob is absent from a partial mirror: say so
            print(f"skipped {path}: not readable in {repo}")
            continue
        if sum("train/loss" in r for r in rows.values()) >= 1000:  # a per-step training-loss log
            write_clean_curve("anomalies2", "nanogpt-" + record[11:].lower().replace("_", "-"), rows)


# ---------------------------------------------------------------------------------------------- heldout/ladders2
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
    """McLeish et al. 2025: every row of the cooldown-end table; the three ~2B models held out. N =
    `params_active_precise`, D = `tokens`, L = `final_loss` (the validation loss at the cooldown's end)."""
    rows = []
    for line in show(repo, *GEMSTONES).splitlines():
        r = json.loads(line, parse_float=str, parse_int=str)   # the source's text, not a re-printed float
        rows.append({"run": f"{r['run_name']}-step{r['step']}", "N": r["params_active_precise"], "D": r["tokens"],
                     "L": r["final_loss"], "split": "heldout" if r["run_name"] in GEMSTONES_HELDOUT else "fit"})
    write_ladder("gemstones_mcleish2025", rows, "ladders2")


# ---------------------------------------------------------------------------------------------- heldout/ladders3
class _Restricted(pickle.Unpickler):
    """Admits only pandas, numpy and plain builtin types (a pickle can name any callable)."""
    BUILTINS = {"slice", "range", "complex", "set", "frozenset", "bytearray", "object", "tuple", "list", "dict",
                "int", "float", "str", "bool"}

    def find_class(self, module: str, name: str):
        top = module.split(".")[0]
        if (top == "builtins" and name not in self.BUILTINS) or name in ("load", "save", "fromfile", "eval",
                                                                         "read_pickle") or \
                top not in ("builtins", "pandas", "numpy", "collections", "datetime", "copyreg", "_codecs"):
            raise pickle.UnpicklingError(f"refused {module}.{name}")
        return super().find_class(module, name)


def porian(repo: Path) -> None:
    """Porian et al. 2024: the isoFLOP runs of the cosine-decay configuration, one ladder per training set. Per
    budget the source's `orig_n` (N, with embeddings), `orig_t` (D) and `orig_loss` (L), written as Python's repr of
    the stored float; 6·N·D is checked to be the budget."""
    commit, files = PORIAN
    for path, name in files.items():
        pick = _Restricted(io.BytesIO(lzma.decompress(show(repo, commit, path, text=False)))).load()
        for k, v in PORIAN_CONFIG.items():
            pick = pick[pick[k] == v]
        if len(pick) != 1:
            raise SystemExit(f"{path}: {len(pick)} rows match {PORIAN_CONFIG}")
        rows = []
        for _, b in pick.iloc[0]["data"].iterrows():
            for n, t, loss in zip(b["orig_n"], b["orig_t"], b["orig_loss"]):
                if not all(math.isfinite(float(x)) for x in (n, t, loss)):
                    raise SystemExit(f"{path}: a non-finite value at budget {b['flops']}")
                if abs(6 * float(n) * float(t) / float(b["flops"]) - 1) > 0.02:
                    raise SystemExit(f"{path}: 6·N·D is not the budget {b['flops']} (N {n}, D {t})")
                rows.append({"run": f"{name}-C{float(b['flops']):.3g}-N{int(round(float(n)))}", "N": repr(float(n)),
                             "D": repr(float(t)), "L": repr(float(loss)),
                             "split": "heldout" if float(b["flops"]) >= PORIAN_HELDOUT_FROM * (1 - 1e-9) else "fit"})
        write_ladder(name, rows, "ladders3")


# ---------------------------------------------------------------------------------------------- anomalies/public
PUBLIC = HERE / "anomalies" / "public"
PUBLIC_COLUMNS = ["step", "train/loss", "eval/loss", "grad/norm/total", "optim/loss_scale", "time/step_s",
                  "throughput/mfu"]
ITER = re.compile(r"iteration\s+(\d+)\s*/\s*\d+\s*\|(.*?)(?=iteration\s+\d+\s*/|validation loss|valid loss|$)", re.S)
FIELDS = {"train/loss": r"lm loss:\s*([0-9.E+-]+)", "grad/norm/total": r"grad norm:\s*([0-9.]+)",
          "optim/loss_scale": r"loss scale:\s*([0-9.]+)", "throughput/mfu": r"TFLOPs:\s*([0-9.]+)"}
VALID = re.compile(r"valid(?:ation)? loss at iteration\s+(\d+)\s*\|\s*lm loss value:\s*([0-9.E+-]+)")


def megatron_rows(text: str, grad: bool = True) -> dict[int, dict]:
    """Megatron-DeepSpeed iteration lines (wrapped lines joined) -> {step: {metric: value}}, exactly as logged."""
    text = re.sub(r"\s*\n\s*", " ", text)
    rows: dict[int, dict] = {}
    for m in ITER.finditer(text):
        step, body = int(m.group(1)), m.group(2)
        row = rows.setdefault(step, {})
        for name, pat in FIELDS.items():
            f = re.search(pat, body)
            if f and (grad or name != "grad/norm/total"):
                row[name] = f.group(1)
        t = re.search(r"elapsed time per iteration \((ms|s)\):\s*([0-9.]+)", body)
        if t:
            row["time/step_s"] = t.group(2) if t.group(1) == "s" else f"{float(t.group(2)) / 1000:.10g}"
    for m in VALID.finditer(text):
        rows.setdefault(int(m.group(1)), {})["eval/loss"] = m.group(2)
    return rows


# name -> (bigscience file, [(first line, last line)] of the log lines its chronicle pastes); their labels, quoting
# the authors, are hand-written beside them (<name>.labels.json): only the curves are extracted
CHRONICLES = {
    "tr8-104B-exp1": ("train/tr8-104B-wide/chronicles.md", [(24, 30)]),
    "tr8-104B-exp2": ("train/tr8-104B-wide/chronicles.md", [(93, 97)]),
    "tr8-104B-exp11": ("train/tr8-104B-wide/chronicles.md", [(638, 642)]),
    "tr8-104B-exp12": ("train/tr8-104B-wide/chronicles.md", [(923, 933), (940, 942)]),
    "tr8b-104B-embnorm-exp7": ("train/tr8b-104B/chronicles.md", [(446, 460)]),
    "tr1-13B-spike": ("train/tr1-13B-base/chronicles.md", [(162, 176)]),
    "tr11-176B-main": ("train/tr11-176B-ml/chronicles.md", [(45, 45), (202, 213), (257, 271), (303, 305)]),
}
NO_GRAD = {"tr1-13B-spike"}  # grad norm 0.000 in every line (not computed by that setup): a zero norm is no reading


def write_public(name: str, rows: dict[int, dict], gz: bool = False, clean: bool = False) -> None:
    path = PUBLIC / f"{name}.csv{'.gz' if gz else ''}"
    cols = [c for c in PUBLIC_COLUMNS if c == "step" or any(c in r for r in rows.values())]
    with (gzip.open(path, "wt", newline="", encoding="utf-8") if gz else
          open(path, "w", newline="", encoding="utf-8")) as f:
        w = csv.writer(f)
        w.writerow(cols)
        for step in sorted(rows):
            w.writerow([step] + [rows[step].get(c, "") for c in cols[1:]])
    if clean:
        (PUBLIC / f"{name}.labels.json").write_text("[]\n")
    print(f"{path.name}: {len(rows)} logged points")


def public(bigscience: Path, nanogpt: Path) -> None:
    """The BLOOM chronicles' incident logs, and the clean llm.c GPT-2 baselines of modded-nanogpt (record #1 and the
    350M track's target)."""
    for name, (path, ranges) in CHRONICLES.items():
        lines = show(bigscience, BIGSCIENCE, path).splitlines()
        text = "\n".join("\n".join(lines[a - 1:b]) for a, b in ranges)
        write_public(name, megatron_rows(text, grad=name not in NO_GRAD))
    small = show(nanogpt, NANOGPT[0], "records/track_1_short/2024-10-13_llmc/main.log")
    write_public("llmc-gpt2-124M", loss_rows(small, norm=True), gz=True, clean=True)
    write_public("llmc-gpt2-124M-every10", loss_rows(small, norm=True, every=10), clean=True)
    medium = show(nanogpt, NANOGPT[0], "records/track_2_medium/2025-01-18/main.log")
    write_public("llmc-gpt2-350M-eval", loss_rows(medium, norm=True), clean=True)


# ---------------------------------------------------------------------------------------------- ladders/gadre2024_*
def gadre(repo: Path) -> None:
    """Gadre et al. 2024, one row per run (exp_data/models/*.json): N = hyperparameters.params, D = .tokens, L = the
    C4 validation `loss` (the paper's "C4 eval"); held out: the 1.4B and 6.9B runs (open_lm_1b, open_lm_7b)."""
    commit, datasets = GADRE
    rows = {short: [] for short in datasets.values()}
    for path in ls_tree(repo, commit, "exp_data/models/"):
        if not path.endswith(".json") or path.count("/") != 2:
            continue
        run = json.loads(show(repo, commit, path))
        hp = run["hyperparameters"]
        (c4,) = [r["loss"] for r in run["results"] if "c4_val" in r["val_data"][0]]
        rows[datasets[run["dataset_name"]]].append((run["name"], hp["params"], hp["tokens"],
                                                    hp["chinchilla_multiplier"], repr(c4),
                                                    "heldout" if "open_lm_" in run["name"] else "fit"))
    for short, rs in rows.items():
        rs.sort(key=lambda r: (r[5] == "heldout", r[1], r[2]))
        with open(HERE / "ladders" / f"gadre2024_{short}.csv", "w", newline="") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(["run", "N", "D", "multiplier", "L", "split"])
            w.writerows(rs)
        print(f"gadre2024_{short}: {len(rs)} rows")


# set -> (the sources it reads, how it is written)
SETS = {
    "heldout/ladders": (("misfitting", "open_athena"), lambda a: (misfitting(a.misfitting), marin(a.open_athena))),
    "heldout/anomalies": (("nanogpt",), lambda a: nanogpt(a.nanogpt)),
    "heldout/anomalies2": (("nanogpt",), lambda a: nanogpt_fresh(a.nanogpt)),
    "heldout/ladders2": (("loss_to_loss", "gemstones"), lambda a: (loss_to_loss(a.loss_to_loss),
                                                                   gemstones(a.gemstones))),
    "heldout/ladders3": (("porian",), lambda a: porian(a.porian)),
    "anomalies/public": (("bigscience", "nanogpt"), lambda a: public(a.bigscience, a.nanogpt)),
    "ladders": (("gadre",), lambda a: gadre(a.gadre)),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for src, repo in (("misfitting", "hadasah/scaling_laws"), ("open-athena", "Open-Athena/scaling-law-analysis"),
                      ("nanogpt", "KellerJordan/modded-nanogpt"),
                      ("loss-to-loss", "KempnerInstitute/loss-to-loss-notebooks"),
                      ("gemstones", "mcleish7/gemstone-scaling-laws"),
                      ("porian", "formll/resolving-scaling-law-discrepancies"),
                      ("bigscience", "bigscience-workshop/bigscience"), ("gadre", "mlfoundations/scaling")):
        ap.add_argument(f"--{src}", type=Path, metavar="DIR", help=f"a checkout of github.com/{repo}")
    ap.add_argument("--only", help=f"comma-separated sets of {', '.join(SETS)} (default: those with sources given)")
    args = ap.parse_args()
    only = args.only.split(",") if args.only else list(SETS)
    if unknown := set(only) - set(SETS):
        ap.error(f"unknown set(s): {', '.join(sorted(unknown))}")
    todo = [s for s in only if all(getattr(args, src) for src in SETS[s][0])]
    if args.only and (missing := set(only) - set(todo)):
        ap.error(f"{', '.join(sorted(missing))}: give the checkout(s) of " +
                 ", ".join(sorted({f"--{src.replace('_', '-')}" for s in missing for src in SETS[s][0]})))
    if not todo:
        ap.error("no set's sources given")
    for s in todo:
        SETS[s][1](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
