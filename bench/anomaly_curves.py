"""Record demo-trainer curves with faults injected through its `inject-fault` command, as labelled CSVs for
bench/anomalies.py (`--curve CSV LABELS.json`).

    .venv/bin/python bench/anomaly_curves.py [--only clean,lr-spike,nan,stall]   # record (slow)
    .venv/bin/python bench/anomaly_curves.py --evaluate                          # the table, as JSON

Each scenario runs `python -m training run --config training/configs/demo.toml` (the demo model; --set makes the
batch smaller so that it runs in minutes on two cores, and sizes the token budget so that the LR schedule is the
demo's), sends `python -m training control RUN inject-fault ...` at chosen steps, then writes the columns the
detectors read (plus step and time) to bench/data/anomalies/demo-<scenario>.csv and its labels, derived from what
the trainer recorded: the steps with `fault/active` set (lr-spike, nan), the gap between two steps (stall).
Starts a private redis-server for the trainer's telemetry and command channel. Slow: a benchmark input maker.
`--evaluate` runs bench/anomalies.py --json with every recorded curve and adds, per kind and severity, the alarms
the detectors raise on the recorded clean run(s) per 10k steps (bench/anomalies.py counts those for its
synthetic clean runs only).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from observatory import contract  # noqa: E402
from observatory.anomalies.routing import watched  # noqa: E402
from private_redis import private_redis  # noqa: E402

OUT = ROOT / "bench" / "data" / "anomalies"
# The demo's shape (4 layers, 16 routed experts, top 4: the same ~235 metrics a step) made cheap enough for two
# shared cores: half the batch, and (SMALL) half the width. The token budget keeps the demo's 62.5k-step schedule.
FAST = ["train.batch_size=8", "train.token_budget=32000000"]
SMALL = ["model.d_model=64", "model.d_ff=128"]
# scenario -> (steps, [(at step, fault words)], extra --set overrides)
SCENARIOS = {
    "clean": (2000, [], SMALL),
    "lr-spike": (560, [(250, ["lr-spike", "3", "factor=30"]), (420, ["lr-spike", "2", "factor=10"])], SMALL),
    "nan": (420, [(260, ["nan", "2"])], []),
    "stall": (330, [(240, ["stall", "seconds=60"])], SMALL),
}
# What an injected fault legitimately causes besides its own kind (bench/anomalies.py's "also").
LR_ALSO = ["update_norm_spike", "grad_norm_spike", "grad_norm_high", "loss_spike", "drop_surge", "hot_expert",
           "dead_expert", "nonfinite"]
NAN_ALSO = ["overflow", "loss_spike", "grad_norm_spike", "update_norm_spike"]


def record(name: str, steps: int, faults, sets: list[str], redis_url: str, workdir: Path) -> list[dict]:
    run_id = f"anomaly-{name}-{int(time.time())}"
    jsonl = workdir / f"{name}.jsonl"
    env = {**os.environ, "REDIS_URL": redis_url,
           contract.CONTROL_KEY_ENV: os.environ.get(contract.CONTROL_KEY_ENV, "anomaly-curves-control-key-0123")}
    cmd = [sys.executable, "-m", "training", "run", "--config", "training/configs/demo.toml", "--run-id", run_id,
           "--steps", str(steps), "--fresh", "--metrics-jsonl", str(jsonl),
           "--set", f'checkpoint.dir="{workdir / "ckpt"}"', *[a for s in FAST + sets for a in ("--set", s)]]
    trainer = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
    pending = list(faults)
    try:
        while trainer.poll() is None:
            time.sleep(0.5)
            if pending and last_step(jsonl) >= pending[0][0]:
                at, words = pending.pop(0)
                subprocess.run([sys.executable, "-m", "training", "control", run_id, "inject-fault", *words,
                                "--reason", f"anomaly curve {name}"], cwd=ROOT, env=env, check=True,
                               stdout=subprocess.DEVNULL)
                print(f"{name}: injected {' '.join(words)} after step {at}", file=sys.stderr)
        if trainer.returncode != 0:
            raise SystemExit(f"{name}: the trainer exited {trainer.returncode}")
    finally:
        if trainer.poll() is None:
            trainer.terminate()
            trainer.wait(30)
        cleanup(redis_url, run_id)
    return [json.loads(line) for line in jsonl.read_text().splitlines() if line.strip()]


def last_step(jsonl: Path) -> int:
    try:
        with open(jsonl, "rb") as f:
            f.seek(max(0, f.seek(0, 2) - 200_000))
            lines = f.read().decode(errors="replace").splitlines()[1:]
    except OSError:
        return -1
    for line in reversed(lines):
        if line.startswith('{"kind":"metrics"'):
            try:
                return json.loads(line)["step"]
            except ValueError:  # the line being written right now
                continue
    return -1


def cleanup(redis_url: str, run_id: str) -> None:
    import redis

    r = redis.Redis.from_url(redis_url)
    r.delete(*[k for k in r.scan_iter(f"obs:run:{run_id}:*")])
    r.srem(contract.RUNS_KEY, run_id)


def write(name: str, records: list[dict]) -> tuple[int, list[dict]]:
    """The CSV (step, time, every column a detector reads) and the labels; returns (rows, labels)."""
    metrics = [r for r in records if r["kind"] == "metrics"]
    cols = sorted({k for r in metrics for k in r["values"] if watched(k)})
    with open(OUT / f"demo-{name}.csv", "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["step", "time", *cols])
        for r in metrics:
            v = r["values"]
            w.writerow([r["step"], f"{r['t']:.3f}", *(_fmt(v[c]) if c in v else "" for c in cols)])
    labels = labels_of(name, metrics)
    (OUT / f"demo-{name}.labels.json").write_text(json.dumps(labels, indent=1) + "\n")
    return len(metrics), labels


def _fmt(x: float) -> str:
    return repr(x) if x != x or x in (float("inf"), float("-inf")) else f"{x:.6g}"


def labels_of(name: str, metrics: list[dict]) -> list[dict]:
    out = []
    if name in ("lr-spike", "nan"):
        active = [r["step"] for r in metrics if r["values"].get(contract.M_FAULT_ACTIVE) == 1.0]
        for start, end in _runs(active):
            if name == "lr-spike":  # the update jumps at once; the loss answers over the next steps
                out.append({"kind": "update_norm_spike", "start_step": start, "end_step": end,
                            "also": [k for k in LR_ALSO if k != "update_norm_spike"]})
                out.append({"kind": "loss_spike", "start_step": start, "end_step": end + 30,
                            "also": [k for k in LR_ALSO if k != "loss_spike"]})
            else:
                out.append({"kind": "nonfinite", "start_step": start, "end_step": end, "also": NAN_ALSO})
    elif name == "stall":
        gaps = [(b["t"] - a["t"], a["step"], b["step"]) for a, b in zip(metrics, metrics[1:])]
        _, before, after = max(gaps)
        out.append({"kind": "stall", "start_step": before, "end_step": after, "also": []})
    return out


def _runs(steps: list[int]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for s in steps:
        if out and s == out[-1][1] + 1:
            out[-1][1] = s
        else:
            out.append([s, s])
    return [(a, b) for a, b in out]


def evaluate() -> dict:
    """bench/anomalies.py's report with the recorded curves, plus the recorded clean runs' alarms per kind."""
    from collections import Counter

    from observatory.anomalies.scan import scan_file

    curves = sorted(OUT.glob("demo-*.csv"))
    cmd = [sys.executable, str(ROOT / "bench" / "anomalies.py"), "--json"]
    for c in curves:
        cmd += ["--curve", str(c), str(c.with_suffix("").with_suffix(".labels.json"))]
    report = json.loads(subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True).stdout)
    import anomalies as bench  # bench/anomalies.py: the same matching, on the recorded curves alone

    recorded = bench.external([[str(c), str(c.with_suffix("").with_suffix(".labels.json"))] for c in curves], {})
    report["recorded_per_kind"] = bench.evaluate(recorded)
    report["recorded_unexplained"] = dict(Counter(
        f"{d['kind']} {d['severity']}" for _, dets, labels, _ in recorded
        for d, ok in zip(dets, bench.match(dets, labels)[1]) if not ok))
    clean = {}
    for c in curves:
        if json.loads(c.with_suffix("").with_suffix(".labels.json").read_text()):
            continue  # has injected events: not a clean run
        with open(c) as f:
            steps = sum(1 for _ in f) - 1
        counts = Counter((a.kind, a.severity) for _, a in scan_file(str(c)))
        clean[c.name] = {"steps": steps, "per_10k_steps": {f"{k} {s}": round(n * 10_000 / steps, 1)
                                                          for (k, s), n in sorted(counts.items())},
                         "warning_or_critical": sum(n for (_, s), n in counts.items() if s != "info")}
    report["recorded_clean"] = clean
    return report


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=",".join(SCENARIOS), help="comma-separated scenarios")
    ap.add_argument("--evaluate", action="store_true", help="print the evaluation with the recorded curves")
    args = ap.parse_args()
    if args.evaluate:
        print(json.dumps(evaluate(), indent=2))
        return 0
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="anomaly-curves-") as tmp, private_redis() as redis_url:
        for name in args.only.split(","):
            steps, faults, sets = SCENARIOS[name]
            t0 = time.monotonic()
            n, labels = write(name, record(name, steps, faults, sets, redis_url, Path(tmp)))
            print(json.dumps({"scenario": name, "set": FAST + sets, "rows": n, "labels": labels,
                              "minutes": round((time.monotonic() - t0) / 60, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
