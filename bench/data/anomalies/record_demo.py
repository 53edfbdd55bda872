"""Record demo-trainer curves with faults injected through its `inject-fault` command, as labelled, gzipped CSVs
for bench/anomalies.py (bench/data/anomalies/README.md). A data recorder; it measures nothing itself.

    nice -n 10 .venv/bin/python bench/data/anomalies/record_demo.py [--only clean,faults]  # slow: minutes a run
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

from observatory import contract  # noqa: E402
from observatory.anomalies.routing import watched  # noqa: E402
from harness import PrivateRedis  # noqa: E402

OUT = Path(__file__).resolve().parent
# scenario -> (steps, [(after step, fault words)]); one run carries every fault, far enough apart to recover
SCENARIOS = {
    "clean": (2000, []),
    "faults": (760, [(250, ["lr-spike", "3", "factor=30"]), (400, ["lr-spike", "2", "factor=10"]),
                     (540, ["nan", "2"]), (640, ["stall", "seconds=60"])]),
}
# What an injected fault legitimately causes besides its own kind (bench/anomalies.py's "also").
LR_ALSO = ["update_norm_spike", "grad_norm_spike", "grad_norm_high", "loss_spike", "drop_surge", "hot_expert",
           "dead_expert", "nonfinite"]
NAN_ALSO = ["overflow", "loss_spike", "grad_norm_spike", "update_norm_spike"]
# Host readings kept as context (whether other processes compete for the CPU), whether or not a detector reads them.
HOST = {contract.HW_CPU_PERCENT, contract.HW_PROCESS_CPU, contract.HW_LOAD1}


def record(name: str, steps: int, faults, redis_url: str | None, workdir: Path) -> list[dict]:
    run_id = f"anomaly-{name}-{int(time.time())}"
    jsonl = workdir / f"{name}.jsonl"
    env = {**os.environ, "REDIS_URL": redis_url,
           contract.CONTROL_KEY_ENV: os.environ.get(contract.CONTROL_KEY_ENV, "anomaly-curves-control-key-0123")}
    cmd = [sys.executable, "-m", "training", "run", "--config", "training/configs/demo.toml", "--run-id", run_id,
           "--steps", str(steps), "--fresh", "--metrics-jsonl", str(jsonl),
           "--set", f'checkpoint.dir="{workdir / name}"', *([] if faults else ["--no-redis"])]
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
        if faults:
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


def write(name: str, records: list[dict], faults) -> tuple[int, list[dict]]:
    """The gzipped CSV (step, time, every column a detector reads) and the labels; returns (rows, labels)."""
    metrics = [r for r in records if r["kind"] == "metrics"]
    labels = labels_of(metrics, faults)  # first: a run whose faults did not show writes nothing
    cols = sorted({k for r in metrics for k in r["values"] if watched(k) or k in HOST})
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["step", "time", *cols])
    for r in metrics:
        v = r["values"]
        w.writerow([r["step"], f"{r['t']:.3f}", *(_fmt(v[c]) if c in v else "" for c in cols)])
    with open(OUT / f"demo-{name}.csv.gz", "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
        gz.write(buf.getvalue().encode())
    (OUT / f"demo-{name}.labels.json").write_text(json.dumps(labels, indent=1) + "\n")
    return len(metrics), labels


def _fmt(x: float) -> str:
    return repr(x) if x != x or x in (float("inf"), float("-inf")) else f"{x:.6g}"


def labels_of(metrics: list[dict], faults) -> list[dict]:
    """Labels from what the trainer recorded: the runs of `fault/active` steps belong to the lr-spike and nan
    faults in the order they were sent; a stall is the longest gap between two steps after it was sent."""
    out = []
    active = [r["step"] for r in metrics if r["values"].get(contract.M_FAULT_ACTIVE) == 1.0]
    stepped = [words[0] for _, words in faults if words[0] in ("lr-spike", "nan")]
    runs = _runs(active)
    if len(runs) != len(stepped):
        raise SystemExit(f"{len(stepped)} step faults sent but {len(runs)} runs of {contract.M_FAULT_ACTIVE} seen")
    for fault, (start, end) in zip(stepped, runs):
        if fault == "lr-spike":  # the update jumps at once; the loss answers over the next steps
            out.append({"kind": "update_norm_spike", "start_step": start, "end_step": end,
                        "also": [k for k in LR_ALSO if k != "update_norm_spike"]})
            out.append({"kind": "loss_spike", "start_step": start, "end_step": end + 30,
                        "also": [k for k in LR_ALSO if k != "loss_spike"]})
        else:
            out.append({"kind": "nonfinite", "start_step": start, "end_step": end, "also": NAN_ALSO})
    for at, words in faults:
        if words[0] == "stall":
            gaps = [(b["t"] - a["t"], a["step"], b["step"]) for a, b in zip(metrics, metrics[1:]) if a["step"] >= at]
            _, before, after = max(gaps)
            out.append({"kind": "stall", "start_step": before, "end_step": after, "also": []})
    return sorted(out, key=lambda lab: lab["start_step"])


def _runs(steps: list[int]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for s in steps:
        if out and s == out[-1][1] + 1:
            out[-1][1] = s
        else:
            out.append([s, s])
    return [(a, b) for a, b in out]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=",".join(SCENARIOS), help="comma-separated scenarios")
    ap.add_argument("--convert", nargs=2, metavar=("SCENARIO", "JSONL"),
                    help="write the CSV and labels from a trainer's --metrics-jsonl (e.g. a run cut short)")
    ap.add_argument("--out", type=Path, default=OUT, help="where the CSVs and labels go (default: bench/data/...)")
    args = ap.parse_args()
    globals()["OUT"] = args.out
    if args.convert:
        args.out.mkdir(parents=True, exist_ok=True)
        name, path = args.convert
        records = []
        for line in Path(path).read_text().splitlines():
            try:
                records.append(json.loads(line))
            except ValueError:  # the line being written when the run was cut
                continue
        last = max(r["step"] for r in records if r["kind"] == "metrics")
        faults = [f for f in SCENARIOS[name][1] if f[0] + 5 < last]  # those sent before the cut
        n, labels = write(name, records, faults)
        print(json.dumps({"scenario": name, "rows": n, "last_step": last, "labels": labels}))
        return 0
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="anomaly-curves-") as tmp, PrivateRedis() as redis:
        for name in args.only.split(","):
            steps, faults = SCENARIOS[name]
            t0 = time.monotonic()
            n, labels = write(name, record(name, steps, faults, redis.url, Path(tmp)), faults)
            print(json.dumps({"scenario": name, "rows": n, "labels": labels,
                              "minutes": round((time.monotonic() - t0) / 60, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
