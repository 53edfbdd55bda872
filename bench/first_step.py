"""Seconds from launching the demo trainer to its first step, with a cold and then a warm compilation cache.

    .venv/bin/python bench/first_step.py --json [--config training/configs/demo.toml]

Three starts of `python -m training run` (no Redis) in a temporary working directory that keeps one compilation
cache across them, as `make run` keeps var/jax-cache: "cold_new" (an empty cache, a new run: its BPE tokenizer is
trained), "warm_resumed" (the same run again, as `make run` continues it: tokenizer and checkpoint loaded) and
"warm_new" (`make run RUN=new`). Measured: launch to the first `metrics` record of the run's JSONL mirror, the
trainer's start-up (until `compiling`) and its compile, and the CPU seconds of the whole start (it is stopped by
SIGTERM once it has stepped; that stop's checkpoint included), which depend little on the load. The load average
is reported beside.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _records(path: Path) -> list[dict]:
    out = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def one_start(config: Path, work: Path, i: int, run_id: str, fresh: bool) -> dict:
    jsonl = work / f"start{i}.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_COMPILATION_CACHE_DIR": str(work / "jax-cache")}
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
    return {"first_step_s": round(first, 1), "setup_s": round(t["compiling"] - t["starting"], 1),
            "compile_s": round(compiled, 1),
            "cpu_s_until_stopped": round(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", action="store_true", help="print one JSON object (the only output format)")
    ap.add_argument("--config", type=Path, default=ROOT / "training/configs/demo.toml")
    args = ap.parse_args(argv)
    load0 = os.getloadavg()[0]
    config = args.config.resolve()
    with tempfile.TemporaryDirectory(prefix="first-step-") as tmp:
        work = Path(tmp)
        out = {"cold_new": one_start(config, work, 0, "first-step-a", fresh=True),
               "warm_resumed": one_start(config, work, 1, "first-step-a", fresh=False),
               "warm_new": one_start(config, work, 2, "first-step-b", fresh=True)}
    print(json.dumps({"config": str(args.config), **out,
                      "loadavg_1m": {"start": round(load0, 2), "end": round(os.getloadavg()[0], 2)},
                      "cpus": os.cpu_count()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
