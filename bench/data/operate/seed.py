"""The operator panel bench's data set (bench/operate.py; measures nothing): `runs` synthetic runs with their series,
heartbeats and checkpoint lists, and `commands` operator commands sent on their control streams, half of them
answered; `cleanup` takes it all away again. Needs Django set up."""

from __future__ import annotations

import json
import time

from django.db import transaction

from observatory import contract
from webapp.control import channel
from webapp.control.models import OperatorCommand
from webapp.metrics import storage
from webapp.metrics.models import Series
from webapp.redis import get_redis
from webapp.runs.models import Run

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
