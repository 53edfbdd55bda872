"""The demo ladder held to its forecast: run the ladder, then its target, and compare. Prints one JSON object.

    .venv/bin/python bench/scaling.py --demo --json [--config training/configs/ladder.toml] [--workdir DIR]
        [--keep] [--cold] [--redis] [--only dense|moe]

Two ladders by default: the dense demo ladder (training/configs/ladder.toml: demo_forecast, demo_error, ...) and
the hero's own MoE family (training/configs/ladder_moe.toml, issue 48: the same figures under "moe", and
moe_demo_error / moe_inside_band at the top level). --config runs that one ladder as the dense one; --only one of
the two.

What it measures and how: docs/PERFORMANCE.md, `scaling_demo` (bench/results/scaling_demo.md).
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import ROOT, parser, report

from training import ladder as lad  # noqa: E402  (no JAX: planning and reading metrics only)


def _run(cmd: list[str], cwd: Path, env: dict, log: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the command and its children): the CPU time barely depends on the load."""
    t0, r0 = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(log, "w") as out:
        rc = subprocess.run(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {rc}; see {log}")
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.monotonic() - t0, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def run_demo(config: Path, work: Path, *, cold: bool = False, redis: bool = False) -> dict:
    config = config.resolve()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cache = work / "var" / "jax-cache" if cold else ROOT / "var" / "jax-cache"
    env["JAX_COMPILATION_CACHE_DIR"] = str(cache)
    load0, t0 = os.getloadavg(), time.time()
    total_s, cpu_s = _run([sys.executable, "-m", "training", "ladder", "--config", str(config), "--with-target",
                          *([] if redis else ["--no-redis"])], work, env, work / "ladder.log")
    cwd = Path.cwd()
    os.chdir(work)  # the ladder's dir and registration paths are relative to the working directory
    try:
        ladder = lad.load_ladder(config)
        target = lad.target_rung(ladder)
        held = json.loads((ladder.dir / "target.json").read_text())
        target_t0 = json.loads(ladder.jsonl(target).read_text().splitlines()[0])["t"]  # its run record
    finally:
        os.chdir(cwd)
    rungs = ladder.rungs
    own = {}
    for r in rungs:  # each rung's own records, first to last: a rung trained earlier in a resumed workdir too
        ts = [t for x in (work / ladder.jsonl(r)).read_text().splitlines() if (t := json.loads(x).get("t")) is not None]
        own[r.name] = round(max(ts) - min(ts), 1) if ts else 0.0
    return {
        "demo_forecast": held["forecast"], "demo_actual": held["actual"], "demo_error": held["error"],
        "inside_band": held["inside_band"], "actual_source": held["source"],
        "rungs": [{"name": r.name, "N": r.N, "D": r.D, "C": r.C, "steps": r.steps} for r in rungs],
        "target": {"N": target.N, "D": target.D, "C": target.C, "steps": target.steps},
        "rung_span": rungs[-1].C / rungs[0].C, "target_over_largest_rung": target.C / rungs[-1].C,
        "seconds": {"ladder": round(target_t0 - t0, 1), "target": round(t0 + total_s - target_t0, 1),
                    "total": round(total_s, 1), "cpu_total": round(cpu_s, 1),
                    "rungs_own": own, "rungs_own_total": round(sum(own.values()), 1)},
        "compile_cache": "cold" if cold else "repository var/jax-cache (warm after a first run)",
        "loadavg_1m": {"start": round(load0[0], 2), "end": round(os.getloadavg()[0], 2)},
        "cpus": os.cpu_count(), "workdir": str(work),
    }


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, prog="bench/scaling.py --demo")
    ap.add_argument("--config", type=Path, default=ROOT / "training/configs/ladder.toml")
    ap.add_argument("--moe-config", type=Path, default=ROOT / "training/configs/ladder_moe.toml")
    ap.add_argument("--only", choices=("dense", "moe"), help="run only this ladder")
    ap.add_argument("--workdir", type=Path, help="run here (kept); default: a temporary directory, removed after")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory (its path is printed)")
    ap.add_argument("--cold", action="store_true", help="an empty compilation cache instead of var/jax-cache")
    ap.add_argument("--redis", action="store_true", help="publish the rungs and the target to Redis (the dashboard)")
    args = ap.parse_args(argv)
    work = args.workdir or Path(tempfile.mkdtemp(prefix="demo-ladder-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        out = {}
        if args.only != "moe":
            (work / "dense").mkdir(exist_ok=True)
            out = run_demo(args.config, (work / "dense").resolve(), cold=args.cold, redis=args.redis)
        if args.only != "dense":
            (work / "moe").mkdir(exist_ok=True)
            moe = run_demo(args.moe_config, (work / "moe").resolve(), cold=args.cold, redis=args.redis)
            out.update(moe=moe, moe_demo_error=moe["demo_error"], moe_inside_band=moe["inside_band"])
    finally:
        if not (args.workdir or args.keep):
            shutil.rmtree(work, ignore_errors=True)
    report("scaling_demo", out, args.json, not args.no_save)
    return 0


if __name__ == "__main__":
    sys.exit(main())
