"""TensorBoard import throughput: `manage.py import_tensorboard` on a logdir written by tensorboard.summary.Writer.

    .venv/bin/python bench/tb_import.py [--runs 2] [--steps 20000] [--tags 4] [--json]

What it measures and how: docs/PERFORMANCE.md, `tb_import` (bench/results/tb_import.md).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from harness import ROOT, Stack, parser, report


def write(logdir: Path, runs: int, steps: range, tags: int, name: str | None = None) -> int:
    from tensorboard.summary import Writer

    n = 0
    for r in range(runs):
        out = logdir / f"run{r}"
        tmp = logdir.parent / f"tmp{r}"
        w = Writer(str(tmp if name else out))
        for s in steps:
            for t in range(tags):
                w.add_scalar(f"group/tag{t}", 1.0 / (s + t + 1), s, wall_time=1.7e9 + s)
                n += 1
        w.close()
        if name:
            (f,) = list(tmp.iterdir())
            out.mkdir(parents=True, exist_ok=True)
            f.rename(out / name)
            tmp.rmdir()
    return n


def timed(env, logdir) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "manage.py", "import_tensorboard", str(logdir)], cwd=ROOT, env=env,
                       capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode:
        raise SystemExit(p.stdout + p.stderr)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "up_to_date": p.stdout.count(": up to date")}


def main() -> int:
    ap = parser(__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20_000)
    ap.add_argument("--tags", type=int, default=4)
    a = ap.parse_args()
    with Stack("tb-import") as stack:  # a migrated throw-away database (the harness's)
        env = stack.site().env
        logdir = Path(stack.tmp) / "logs"
        values = write(logdir, a.runs, range(a.steps), a.tags)
        first = timed(env, logdir)
        again = timed(env, logdir)
        extra = write(logdir, a.runs, range(a.steps, a.steps + a.steps // 10), a.tags,
                      name="events.out.tfevents.9999999999.more")
        appended = timed(env, logdir)
    out = {"runs": a.runs, "steps": a.steps, "tags": a.tags, "values": values, "appended_values": extra,
           "first_import": {**first, "values_per_cpu_s": round(values / first["cpu_s"])},
           "reimport_unchanged": {**again, "values_per_cpu_s": round(values / again["cpu_s"])},
           "import_after_append": {**appended, "values_per_cpu_s": round((values + extra) / appended["cpu_s"])},
           "load": os.getloadavg()}
    report("tb_import", out, a.json, not a.no_save)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
