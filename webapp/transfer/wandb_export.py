"""An Observatory run as a W&B offline run directory (`manage.py export_wandb`), written by the `wandb` package
itself in offline mode (nothing leaves the machine): `wandb sync <dir>` uploads it later, and `import_wandb`
reads it back with the same values.

Every stored point is logged with `step=` its step, a step's series in one `log` call (NaN/±Inf as such); the
run's name and config go to `wandb.init`. Points are read a window of steps at a time (bounded memory). W&B has
no event track: the run's events are not exported.
"""

from __future__ import annotations

import math
import os
import re
from typing import Callable

from django.db import connection

from observatory.downsample import NAN, NEGINF, POSINF
from webapp.metrics.models import Point, Series
from webapp.runs.models import Run

_WINDOW_POINTS = 50_000
_SPECIAL = {NAN: math.nan, POSINF: math.inf, NEGINF: -math.inf}
_BAD_WANDB_ID = re.compile(r"[^A-Za-z0-9_.-]")


def _windows(series: list[Series]):
    """[(lo, hi)] step windows of about _WINDOW_POINTS points, covering every stored step."""
    present = [s for s in series if s.count and s.first_step is not None]
    if not present:
        return []
    lo, hi = min(s.first_step for s in present), max(s.last_step for s in present)
    total = sum(s.count for s in present)
    span = max(1, (hi - lo + 1) * _WINDOW_POINTS // max(1, total))
    return [(a, min(hi, a + span - 1)) for a in range(lo, hi + 1, span)]


def rows(run: Run):
    """(step, {name: value}) in ascending step, every stored point of every series of the run."""
    series = list(Series.objects.filter(run=run).order_by("name"))
    names = {s.id: s.name for s in series}
    if not names:
        return
    qn = connection.ops.quote_name
    marks = ", ".join(["%s"] * len(names))
    sql = (f"SELECT {qn('step')}, {qn('series_id')}, {qn('value')}, {qn('special')} FROM "
           f"{qn(Point._meta.db_table)} WHERE {qn('series_id')} IN ({marks}) AND {qn('step')} BETWEEN %s AND %s "
           f"ORDER BY {qn('step')}, {qn('series_id')}")
    for lo, hi in _windows(series):
        with connection.cursor() as cur:
            cur.execute(sql, [*names, lo, hi])
            fetched = cur.fetchall()
        row, at = {}, None
        for step, sid, value, special in fetched:
            if step != at:
                if row:
                    yield at, row
                row, at = {}, step
            row[names[sid]] = _SPECIAL[special] if special else float(value)
        if row:
            yield at, row


def export(run: Run, out_dir: str, project: str = "observatory",
           progress: Callable[[int], None] | None = None) -> dict:
    """Write the run as <out_dir>/wandb/offline-run-*/; {"path", "wandb_id", "steps", "points"}."""
    steps = points = 0
    import wandb  # offline, silent, no git, no console capture: said in wandb.Settings, not the environment

    os.makedirs(out_dir, exist_ok=True)
    settings = wandb.Settings(console="off", silent=True, x_disable_stats=True, disable_git=True,
                              save_code=False)
    wid = _BAD_WANDB_ID.sub("-", run.id)
    wrun = wandb.init(mode="offline", dir=out_dir, project=project, id=wid, name=run.name or run.id,
                      config={**(run.config or {}), "observatory_run_id": run.id}, settings=settings)
    try:
        path = os.path.dirname(wrun.dir) if wrun.dir else None
        for step, values in rows(run):
            wrun.log(values, step=step)
            steps += 1
            points += len(values)
            if progress and steps % 10_000 == 0:
                progress(steps)
    finally:
        wrun.finish()
    return {"path": path, "wandb_id": wid, "steps": steps, "points": points}
