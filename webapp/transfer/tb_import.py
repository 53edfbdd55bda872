"""A TensorBoard logdir as Observatory runs, written through apply_messages (webapp.transfer.imports) like the W&B
import and anything ingest reads. How run ids and metric names are made, and why a second import writes nothing:
docs/CLIENT.md "TensorBoard import: names and repeats".
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from dataclasses import dataclass, field
from typing import Callable, Iterator

import numpy as np
from django.db import connection, transaction

from observatory import contract
from observatory.downsample import FINITE, NAN, NEGINF, POSINF
from webapp.metrics import fence
from webapp.metrics.models import Point, Series
from webapp.runs.models import Run
from webapp.transfer import imports
from webapp.transfer.tb_file import TBRun

SOURCE = "tensorboard"
WALL = "wall_time/"
DEFAULT_PREFIX = "tb-"
_BAD_RUN = re.compile(f"[^{contract.RUN_ID_CHARS}]+")
_BAD_NAME = re.compile(f"[^{contract.METRIC_NAME_CHARS}]")
_NAME_LEN = contract.MAX_NAME_LEN - len(WALL)  # room for the wall-time companion
_PER_RECORD = 1000  # metrics per message, as the W&B import
_WINDOW_POINTS = 20_000  # points per step window while building messages: bounded memory


# ------------------------------------------------------------------------------------------------ names
def _cut_id(text: str, key: str) -> str:
    if len(text) <= 64:
        return text
    return f"{text[:55]}-{hashlib.sha1(key.encode()).hexdigest()[:8]}"


def base_run_id(prefix: str, rel: str, logdir: str) -> str:
    part = os.path.basename(os.path.realpath(logdir)) if rel == "." else rel.replace(os.sep, "/")
    return _cut_id(_BAD_RUN.sub("-", prefix + part).lstrip("-_.") or "tb", rel)


def _with_suffix(base: str, n: int) -> str:
    tail = f"-{n}"
    return base[: 64 - len(tail)] + tail


def metric_names(tags) -> dict[str, str]:
    """{tag: metric name}, deterministic (sorted tags); no name collides with another's wall-time companion."""
    taken: set[str] = set()
    out: dict[str, str] = {}
    for tag in sorted(tags):
        base = _BAD_NAME.sub("_", tag)
        if not base or base[0] in "./:-":
            base = "_" + base
        base = base[:_NAME_LEN]
        name, n = base, 1
        while name in taken or WALL + name in taken:
            n += 1
            name = f"{base[: _NAME_LEN - len(str(n)) - 1]}_{n}"
        taken |= {name, WALL + name}
        out[tag] = name
    return out


def origin(run: TBRun, prefix: str) -> dict:
    return {"path": run.path, "run": run.rel, "prefix": prefix}


def assign_run_ids(runs: list[TBRun], prefix: str, logdir: str, owner) -> dict[str, tuple[str, bool]]:
    """{run's rel path: (run id, True if it is this directory's earlier import)}."""
    out: dict[str, tuple[str, bool]] = {}
    used: set[str] = set()
    for run in runs:
        mine = (Run.objects.filter(source=SOURCE, config__tensorboard__path=run.path,
                                   config__tensorboard__prefix=prefix).order_by("id").values_list("id", flat=True)
                .first())
        if mine and mine not in used:
            out[run.rel] = (mine, True)
            used.add(mine)
            continue
        base = base_run_id(prefix, run.rel, logdir)
        n, rid = 1, base
        while rid in used or Run.objects.filter(pk=rid).exists() or imports.claim_blocks(rid, owner):
            n += 1
            rid = _with_suffix(base, n)
        out[run.rel] = (rid, False)
        used.add(rid)
    return out


# ------------------------------------------------------------------------------------------------ import
@dataclass
class Result:
    run_id: str
    name: str
    created: bool = False
    series: int = 0
    new: int = 0  # points not stored before
    changed: int = 0  # points stored with another value (a rewritten step)
    same: int = 0  # points already stored as read
    nonfinite: int = 0
    last_step: int | None = None
    renamed: dict[str, str] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)

    @property
    def up_to_date(self) -> bool:
        return not self.created and not self.new and not self.changed


def _special(values: np.ndarray) -> np.ndarray:
    sp = np.full(values.shape, FINITE, dtype=np.int8)
    sp[np.isnan(values)] = NAN
    sp[values == math.inf] = POSINF
    sp[values == -math.inf] = NEGINF
    return sp


def _stored(series_id: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    qn = connection.ops.quote_name
    sql = (f"SELECT {qn('step')}, {qn('value')}, {qn('special')} FROM {qn(Point._meta.db_table)} "
           f"WHERE {qn('series_id')} = %s ORDER BY {qn('step')}")
    with connection.cursor() as cur:
        cur.execute(sql, [series_id])
        rows = cur.fetchall()
    if not rows:
        return np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.int8)
    steps, values, special = zip(*rows)
    return (np.array(steps, dtype=np.int64), np.array([math.nan if v is None else v for v in values]),
            np.array(special, dtype=np.int8))


def _to_write(steps: np.ndarray, values: np.ndarray, stored) -> tuple[np.ndarray, int, int]:
    """Mask of the points that differ from what is stored, and how many are new and changed."""
    s_steps, s_values, s_special = stored
    if not len(s_steps):
        return np.ones(len(steps), bool), len(steps), 0
    idx = np.clip(np.searchsorted(s_steps, steps), 0, len(s_steps) - 1)
    present = s_steps[idx] == steps
    sp = _special(values)
    same = present & (s_special[idx] == sp) & ((sp != FINITE) | (s_values[idx] == values))
    return ~same, int((~present).sum()), int((present & ~same).sum())


def _messages(run_id: str, columns: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]
              ) -> Iterator[contract.Message]:
    """{metric: (steps, values, t)} (each ascending in step) -> metrics messages, one per step (split past
    _PER_RECORD names), built a window of steps at a time so that memory stays bounded. `t`: the step's earliest
    wall time."""
    if not columns:
        return
    all_steps = np.unique(np.concatenate([c[0] for c in columns.values()]))
    per_window = max(1, _WINDOW_POINTS // len(columns))
    for i in range(0, len(all_steps), per_window):
        lo, hi = all_steps[i], all_steps[min(i + per_window, len(all_steps)) - 1]
        by_step: dict[int, dict[str, float]] = {}
        when: dict[int, float] = {}
        for name, (steps, values, t) in columns.items():
            a, b = np.searchsorted(steps, lo, side="left"), np.searchsorted(steps, hi, side="right")
            for s, v, w in zip(steps[a:b].tolist(), values[a:b].tolist(), t[a:b].tolist()):
                by_step.setdefault(s, {})[name] = v
                when[s] = min(when.get(s, w), w)
        for s in sorted(by_step):
            items = list(by_step[s].items())
            for j in range(0, len(items), _PER_RECORD):
                yield contract.Message(run=run_id, kind="metrics",
                                       data={"t": when[s], "step": s, "values": dict(items[j:j + _PER_RECORD])})


def _msg(run_id: str, kind: str, data: dict) -> contract.Message:
    return contract.decode(contract.encode(run_id, kind, data), expect_run=run_id)


def import_run(tb: TBRun, run_id: str, logdir: str, prefix: str, owner=None, wall_times: bool = True,
               say: Callable[[str], None] = lambda s: None) -> Result:
    """Write what is new in one read run (tb_file.read_run) to `run_id`, in one transaction."""
    name = (os.path.basename(os.path.realpath(logdir)) if tb.rel == "." else tb.rel.replace(os.sep, "/"))[:200]
    res = Result(run_id, name, skipped=list(tb.skipped))
    names = metric_names(tb.tags)
    res.renamed = {tag: n for tag, n in names.items() if n != tag}
    columns: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    first_t, last_t = math.inf, -math.inf
    for tag, data in tb.tags.items():
        steps, values, walls = data.finish()
        bad = (steps < 0) | (steps > contract.MAX_STEP)
        if bad.any():
            res.skipped.append(f"tag {tag!r}: {int(bad.sum())} values at steps outside [0, 2**62]")
            steps, values, walls = steps[~bad], values[~bad], walls[~bad]
        if not len(steps):
            continue
        first_t, last_t = min(first_t, float(walls.min())), max(last_t, float(walls.max()))
        res.nonfinite += int((~np.isfinite(values)).sum())
        columns[names[tag]] = (steps, values, walls)
        if wall_times:
            columns[WALL + names[tag]] = (steps, walls, walls)
    res.series = len(columns)
    res.last_step = max((int(c[0][-1]) for c in columns.values()), default=None)
    if not columns:
        res.skipped.append("no scalar values: nothing to import")
        return res

    with transaction.atomic():
        fence.lock([run_id])  # one writer of the run from here on: what is read below stays what is stored
        existing = Run.objects.filter(pk=run_id).first()
        res.created = existing is None
        sids = dict(Series.objects.filter(run_id=run_id, name__in=list(columns)).values_list("name", "id"))
        write: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        for mname, (steps, values, t) in columns.items():
            stored = _stored(sids[mname]) if mname in sids else None
            if stored is None:
                mask, new, changed = np.ones(len(steps), bool), len(steps), 0
            else:
                mask, new, changed = _to_write(steps, values, stored)
            res.new += new
            res.changed += changed
            res.same += len(steps) - new - changed
            if mask.any():
                write[mname] = (steps[mask], values[mask], t[mask])
        if res.up_to_date:
            return res
        say(f"  {run_id}: writing {res.new:,} new and {res.changed:,} changed points")
        config = dict(existing.config) if existing and isinstance(existing.config, dict) else {}
        config["tensorboard"] = origin(tb, prefix)
        head = [_msg(run_id, "run", {"t": first_t, "name": existing.name if existing else name, "config": config})]
        tail = [_msg(run_id, "state", {"t": last_t, "state": "stopped", "step": res.last_step,
                                       "detail": "imported from TensorBoard"}),
                _msg(run_id, "event", {"t": last_t, "step": res.last_step, "name": "imported_from_tensorboard",
                                       "payload": {"path": tb.path, "new": res.new, "changed": res.changed,
                                                   "skipped": res.skipped[:100]}})]
        imports.claim(run_id, owner)
        imports.apply_chunked(_chain(head, _messages(run_id, write), tail), SOURCE)
    return res


def _chain(*parts):
    for part in parts:
        yield from part
