"""The ingest bench's data sets (bench/ingest.py; they measure nothing): telemetry streams pre-filled with synthetic
steps (prefill), and a TensorBoard logdir of synthetic scalars written by tensorboard.summary.Writer (tb_write)."""

from __future__ import annotations

import random
from pathlib import Path


def prefill(client, runs: int, steps: int, width: int, seed: int = 1) -> list[str]:
    """`runs` runs' telemetry streams, `steps` metrics entries each of `width` random values; the run ids."""
    from observatory import contract

    rnd = random.Random(seed)
    names = [f"bench/layer{i // 16}/m{i % 16}" for i in range(width)]
    run_ids = [f"bench-{i}" for i in range(runs)]
    for run_id in run_ids:
        pipe = client.pipeline(transaction=False)
        pipe.sadd(contract.RUNS_KEY, run_id)
        for step in range(steps):
            pipe.xadd(contract.telemetry_stream(run_id),
                      contract.metrics_fields(run_id, step, {n: rnd.random() for n in names}, t=1.7e9 + step))
            if len(pipe) >= 200:
                pipe.execute()
        pipe.execute()
    return run_ids


def tb_write(logdir: Path, runs: int, steps: range, tags: int, name: str | None = None) -> int:
    """logdir/run<r>/ for each run: `tags` scalars at each step (an event file named `name`, else the Writer's own
    name); how many values it wrote."""
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
