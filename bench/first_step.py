"""Seconds from launching the demo trainer to its first step, with cold and then warm caches under var/.

    .venv/bin/python bench/first_step.py --json [--config training/configs/demo.toml] [--compare OTHER_TREE]

What it measures and how: docs/PERFORMANCE.md, `first_step` (bench/results/first_step.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import ROOT, parser, report


def _records(path: Path) -> list[dict]:
    out = []
    if path.exists():
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
    return out


def one_start(config: Path, work: Path, i: int, run_id: str, fresh: bool, code: Path = ROOT) -> dict:
    jsonl = work / f"start{i}.jsonl"
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}  # run.compile_cache decides
    env["PYTHONPATH"] = str(code)
    cmd = [sys.executable, "-m", "training", "run", "--config", str(config), "--run-id", run_id,
           "--no-redis", "--metrics-jsonl", str(jsonl), *(["--fresh"] if fresh else [])]
    t0, r0 = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(work / f"start{i}.log", "w") as log:
        proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        while proc.poll() is None and not any(r["kind"] == "metrics" for r in _records(jsonl)):
            time.sleep(0.05)
        first = time.monotonic() - t0
        if proc.poll() is not None:
            raise SystemExit(f"the trainer exited {proc.returncode} before its first step; see {work}/start{i}.log")
        proc.send_signal(signal.SIGTERM)
        proc.wait(300)
    finally:
        if proc.poll() is None:
            proc.kill()
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)  # the whole start, its stop (a checkpoint) included
    recs = _records(jsonl)
    t = {r["state"]: r["t"] for r in reversed(recs) if r["kind"] == "state"}  # each state's first time
    compiled = next(r["payload"]["seconds"] for r in recs if r["kind"] == "event" and r["name"] == "compiled")
    manifest = next((r["manifest"] for r in recs if r["kind"] == "manifest"), {})
    cc = next((r["payload"].get("compile_cache") for r in recs if r["kind"] == "event" and r["name"] == "compiled"),
              None)
    return {"first_step_s": round(first, 1), "setup_s": round(t["compiling"] - t["starting"], 1),
            "compile_s": round(compiled, 1), "data_load_s": round(manifest.get("load_seconds") or 0, 1),
            "data_cache": manifest.get("data_cache"), "compile_cache": cc,
            "cpu_s_until_stopped": round(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime, 1)}


STARTS = (("cold_new", "first-step-a", True), ("warm_resumed", "first-step-a", False),
          ("warm_new", "first-step-b", True))


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--config", type=Path, default=ROOT / "training/configs/demo.toml")
    ap.add_argument("--compare", type=Path, help="another source tree, measured interleaved with this one")
    ap.add_argument("--starts", type=int, choices=(1, 2, 3), default=3, help="only the first N starts (a smoke)")
    args = ap.parse_args(argv)
    load0 = os.getloadavg()[0]
    config = args.config.resolve()
    trees = {"this": ROOT, **({"compare": args.compare.resolve()} if args.compare else {})}
    out: dict = {name: {} for name in trees}
    with tempfile.TemporaryDirectory(prefix="first-step-") as tmp:
        for i, (start, run_id, fresh) in enumerate(STARTS[:args.starts]):
            for name, code in trees.items():
                work = Path(tmp) / name
                work.mkdir(exist_ok=True)
                out[name][start] = one_start(config, work, i, run_id, fresh, code)
    if args.compare:
        out["ratio_first_step_compare_over_this"] = {
            s: round(out["compare"][s]["first_step_s"] / out["this"][s]["first_step_s"], 2) for s in out["this"]}
    return report("first_step", {"config": str(args.config), **(out if args.compare else out["this"]),
                                 "trees": {k: str(v) for k, v in trees.items()},
                                 "loadavg_1m": {"start": round(load0, 2), "end": round(os.getloadavg()[0], 2)}},
                  args.json, not args.no_save)


if __name__ == "__main__":
    sys.exit(main())
