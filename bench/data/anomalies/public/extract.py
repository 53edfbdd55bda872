"""Public incident logs of large open runs, as labelled CSVs for bench/anomalies.py (this folder). A data
extractor, kept beside the data it made (it measures nothing itself).

    .venv/bin/python bench/data/anomalies/public/extract.py --bigscience DIR --nanogpt DIR

What it measures and how: docs/PERFORMANCE.md, `anomalies` (bench/results/anomalies.md).
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import re
import subprocess
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent
COLUMNS = ["step", "train/loss", "eval/loss", "grad/norm/total", "optim/loss_scale", "time/step_s", "throughput/mfu"]

# name -> (repo, file, [(first line, last line)], labels, note on what was left out)
CHRONICLES = {
    "tr8-104B-exp1": ("bigscience", "train/tr8-104B-wide/chronicles.md", [(24, 30)], [
        {"kind": "loss_spike", "start_step": 7010, "end_step": 7220, "also": ["grad_norm_spike"],
         "why": "line 21: 'Somewhere between iteration 7000 and 7010 lm loss jumped from 6.4 to 14 and then 200 "
                "iterations later it went down to ~7 and stayed there'"}]),
    "tr8-104B-exp2": ("bigscience", "train/tr8-104B-wide/chronicles.md", [(93, 97)], [
        {"kind": "loss_spike", "start_step": 6910, "end_step": 6940, "also": ["grad_norm_spike"],
         "why": "line 89: 'Similar to glitch 1, but even sooner we went from 6.3 to 9 to 6.7'"}]),
    "tr8-104B-exp11": ("bigscience", "train/tr8-104B-wide/chronicles.md", [(638, 642)], [
        {"kind": "loss_spike", "start_step": 11447, "end_step": 11448, "also": ["grad_norm_spike"],
         "why": "line 636: 'At iteration 11447 we registered a huge spike'"}]),
    "tr8-104B-exp12": ("bigscience", "train/tr8-104B-wide/chronicles.md", [(923, 933), (940, 942)], [
        {"kind": "loss_spike", "start_step": 8740, "end_step": 9027, "also": ["grad_norm_spike", "overflow"],
         "why": "line 921: 'there was a similar spike to Exp 11 but some 2.5k iterations sooner', line 938: "
                "'and then training diverged'; the start is the first pasted point off the level (grad norm 16x)"}]),
    "tr8b-104B-embnorm-exp7": ("bigscience", "train/tr8b-104B/chronicles.md", [(446, 460)], [
        {"kind": "loss_spike", "start_step": 17062, "end_step": 17068, "also": ["overflow", "grad_norm_spike"],
         "why": "line 444: 'there was a spike but much smaller this time - only 2.7 to 4.4'"},
        {"kind": "overflow", "start_step": 17062, "end_step": 17068, "also": ["loss_spike", "grad_norm_spike"],
         "why": "lines 448-459: '[deepscale] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 1048576.0, "
                "reducing to ...' before iterations 17062-17068, the loss scale halved 5 times"}]),
    "tr1-13B-spike": ("bigscience", "train/tr1-13B-base/chronicles.md", [(162, 176)], [
        {"kind": "loss_spike", "start_step": 29050, "end_step": 29090, "also": ["overflow"],
         "why": "line 160: 'The training loss just jumped from ~3 to ~9'; line 181: 'It took some 500 iterations "
                "to recover'"}]),
    "tr11-176B-main": ("bigscience", "train/tr11-176B-ml/chronicles.md", [(45, 45), (202, 213), (257, 271),
                                                                         (303, 305)], [
        {"kind": "loss_spike", "start_step": 31216, "end_step": 31250, "also": ["grad_norm_spike"],
         "why": "line 198: '2022-04-12 First lm loss spike', line 200: 'Luckily it recovered in ~30 iterations' "
                "(its chart: images/2022-04-12-spike-31216-31250.png)"},
        {"kind": "throughput_drop", "start_step": 42782, "end_step": 45000, "also": ["step_time_rise"],
         "why": "line 250: 'sudden 5% drop in throughput', line 254: 'The performance of the system dropped from "
                "149 to 140 TFLOPs and remained there'"}]),
}
# grad norm 0.000 in every tr1-13B line (not computed by that setup): left out, a zero norm is no reading.
NO_GRAD = {"tr1-13B-spike"}

ITER = re.compile(r"iteration\s+(\d+)\s*/\s*\d+\s*\|(.*?)(?=iteration\s+\d+\s*/|validation loss|valid loss|$)", re.S)
FIELDS = {"train/loss": r"lm loss:\s*([0-9.E+-]+)", "grad/norm/total": r"grad norm:\s*([0-9.]+)",
          "optim/loss_scale": r"loss scale:\s*([0-9.]+)", "throughput/mfu": r"TFLOPs:\s*([0-9.]+)"}
VALID = re.compile(r"valid(?:ation)? loss at iteration\s+(\d+)\s*\|\s*lm loss value:\s*([0-9.E+-]+)")


def show(repo: Path, path: str) -> list[str]:
    return subprocess.run(["git", "-C", str(repo), "show", f"HEAD:{path}"], check=True, capture_output=True,
                          text=True).stdout.splitlines()


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


def write(name: str, rows: dict[int, dict], labels: list[dict], gz: bool = False) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{name}.csv{'.gz' if gz else ''}"
    cols = [c for c in COLUMNS if c == "step" or any(c in r for r in rows.values())]
    opener = (lambda: gzip.open(path, "wt", newline="", encoding="utf-8")) if gz else (
        lambda: open(path, "w", newline="", encoding="utf-8"))
    with opener() as f:
        w = csv.writer(f)
        w.writerow(cols)
        for step in sorted(rows):
            w.writerow([step] + [rows[step].get(c, "") for c in cols[1:]])
    (OUT / f"{name}.labels.json").write_text(json.dumps(labels, indent=1) + "\n")
    print(f"{path.name}: {len(rows)} logged points, {len(labels)} labels")


def llmc(lines: list[str], every: int = 1) -> dict[int, dict]:
    """llm.c main.log: `s:N trl:X lr:Y norm:Z` per step, `s:N tel:X` per evaluation."""
    rows: dict[int, dict] = {}
    for line in lines:
        m = re.match(r"s:(\d+) (trl|tel):([0-9.]+)(?: lr:[0-9.]+ norm:([0-9.]+))?", line)
        if not m or int(m.group(1)) % every:
            continue
        row = rows.setdefault(int(m.group(1)), {})
        if m.group(2) == "trl":
            row["train/loss"] = m.group(3)
            if m.group(4):
                row["grad/norm/total"] = m.group(4)
        else:
            row["eval/loss"] = m.group(3)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bigscience", type=Path, required=True)
    ap.add_argument("--nanogpt", type=Path, required=True)
    args = ap.parse_args()
    repos = {"bigscience": args.bigscience}
    for name, (repo, path, ranges, labels) in CHRONICLES.items():
        lines = show(repos[repo], path)
        text = "\n".join("\n".join(lines[a - 1:b]) for a, b in ranges)
        write(name, megatron_rows(text, grad=name not in NO_GRAD), labels)
    # clean public curves: the llm.c GPT-2 baselines (modded-nanogpt README, record #1 and the 350M track's target)
    small = show(args.nanogpt, "records/track_1_short/2024-10-13_llmc/main.log")
    write("llmc-gpt2-124M", llmc(small), [], gz=True)
    write("llmc-gpt2-124M-every10", llmc(small, every=10), [])
    write("llmc-gpt2-350M-eval", llmc(show(args.nanogpt, "records/track_2_medium/2025-01-18/main.log")), [])
    return 0


if __name__ == "__main__":
    sys.exit(main())
