"""The operator panel's cost: one snapshot (what /ws/operate/ pushes) and one audit-trail sync, for many runs: `runs`
synthetic runs with their series, heartbeats and checkpoint lists, and `commands` operator commands sent on their
control streams, half of them answered (all taken away again after)."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time

from harness import django_here, med, parser, report, timed_ms  # bench/, this script's directory, is first on sys.path

os.environ.setdefault("OBS_CONTROL_KEY", "bench-operate-key-0123456789")
django_here(os.path.join(tempfile.gettempdir(), "obs-bench-operate.sqlite3"))  # DATABASE_URL, else this file

from django.db import connection, transaction  # noqa: E402

from observatory import contract  # noqa: E402
from webapp.control import channel, snapshot  # noqa: E402
from webapp.control.models import OperatorCommand  # noqa: E402
from webapp.metrics import storage  # noqa: E402
from webapp.metrics.models import Series  # noqa: E402
from webapp.redis import get_redis  # noqa: E402
from webapp.runs.models import Run  # noqa: E402

PREFIX = "bench-operate-"
NAMES = (contract.M_LOSS, contract.M_LR, contract.M_LR_MULT, contract.M_MFU, contract.M_MIX_STAGE,
         contract.mixture_weight("code"), contract.mixture_weight("prose"))


def setup(runs: int, commands: int, points: int) -> list[str]:
    r, ids = get_redis(), [f"{PREFIX}{i:03d}" for i in range(runs)]
    cleanup(ids)
    config = {"train": {"batch_size": 16, "lr": 3e-3, "token_budget": 64_000_000}, "model": {"seq_len": 64}}
    for run_id in ids:
        run = Run.objects.create(id=run_id, name=run_id, config=config, last_step=points - 1)
        for name in NAMES:
            series = Series.objects.create(run=run, name=name)
            with transaction.atomic():
                storage.bulk_load(series.id, ((s, 0.5) for s in range(points)))
            Series.objects.filter(pk=series.pk).update(count=points, first_step=0, last_step=points - 1)
        r.set(contract.heartbeat_key(run_id), json.dumps({"t": time.time(), "phase": "training",
                                                          "step": points - 1, "tokens": points * 1024,
                                                          "token_budget": 64_000_000, "eta_s": 100.0,
                                                          "steps_per_s": 5.0}))
        r.set(contract.checkpoints_key(run_id), json.dumps({"t": time.time(), "checkpoints": [
            {"step": s, "why": "periodic", "kind": "periodic", "saved_at": time.time(), "bytes": 4.5e7,
             "kept": "newest 3"} for s in range(0, points, 50)][-20:]}))
    for i in range(commands):
        run_id = ids[i % runs]
        cmd = OperatorCommand.objects.create(id=f"{PREFIX}cmd-{i:05d}", run_id=run_id, name="pause", reason="bench")
        channel.send(cmd)
        if i % 2:  # half answered, half still open (the ones a sync has to look up)
            r.xadd(contract.ack_stream(run_id), contract.ack_fields(cmd.id, "applied", "paused", 10))
    return ids


def cleanup(ids: list[str]) -> None:
    Run.objects.filter(id__startswith=PREFIX).delete()
    r = get_redis()
    for run_id in ids:
        r.delete(contract.heartbeat_key(run_id), contract.checkpoints_key(run_id), contract.ack_stream(run_id),
                 contract.control_stream(run_id))


def timed(fn, repeat: int) -> dict:
    out = timed_ms(fn, repeat)
    return {"median_ms": med(out, 2), "max_ms": round(max(out), 2)}


def main() -> int:
    ap = parser(__doc__, "operate")
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--commands", type=int, default=200)
    ap.add_argument("--points", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=15)
    a = ap.parse_args()
    ids = setup(a.runs, a.commands, a.points)
    try:
        body = snapshot.build()
        result = {"runs": a.runs, "commands": a.commands, "points_per_series": a.points,
                  "database": connection.vendor,
                  "snapshot_bytes": len(json.dumps({"type": "snapshot", **body})),
                  "sync": timed(lambda: channel.sync(ids), a.repeat),
                  "snapshot_build": timed(snapshot.build, a.repeat)}
    finally:
        cleanup(ids)
    return report("operate", result, a.json, not a.no_save)


if __name__ == "__main__":
    sys.exit(main())
