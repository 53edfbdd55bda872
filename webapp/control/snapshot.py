"""What the operator panel shows, built from shared state only (SQL, the heartbeat and checkpoint keys, the acks):
every controllable run with its progress and steering knobs, and the recent commands with their outcomes."""

from __future__ import annotations

import datetime as dt
import json

from django.db.models import F, Q
from django.utils import timezone

from observatory import contract
from webapp.control import channel, plan
from webapp.control.models import OperatorCommand
from webapp.metrics.models import Point
from webapp.redis import get_redis
from webapp.runs.models import IMPORTED_SOURCES, Run, RunEvent, json_clean

MAX_RUNS = 50
MAX_COMMANDS = 100
LATEST = (contract.M_MFU, contract.M_LR, contract.M_LR_MULT, contract.M_MIX_STAGE, contract.M_TOTAL_STEPS,
          contract.M_TOKENS_PER_S)
WEIGHT_PREFIX = contract.mixture_weight("")


def controllable_runs():
    """Runs a trainer could be listening for (imported runs have no control stream), newest first."""
    return Run.objects.exclude(source__in=IMPORTED_SOURCES).order_by("-updated_at")[:MAX_RUNS]


def latest_values(run_ids: list[str]) -> dict[str, dict[str, float | None]]:
    """{run: {series: value at its last step}} for the panel's numbers (one query: each series' newest point)."""
    rows = (Point.objects.filter(series__run_id__in=run_ids, step=F("series__last_step"))
            .filter(Q(series__name__in=LATEST) | Q(series__name__startswith=WEIGHT_PREFIX))
            .values_list("series__run_id", "series__name", "value"))
    out: dict[str, dict] = {r: {} for r in run_ids}
    for run_id, name, value in rows:
        out[run_id][name] = value
    return out


def heartbeats(run_ids: list[str]) -> dict[str, dict | None]:
    """The live heartbeat keys (fresher than the database's copy; None once expired)."""
    pipe = get_redis().pipeline(transaction=False)
    for run_id in run_ids:
        pipe.get(contract.heartbeat_key(run_id))
    out = {}
    for run_id, raw in zip(run_ids, pipe.execute()):
        try:
            out[run_id] = json.loads(raw) if raw else None
        except ValueError:
            out[run_id] = None
    return out


def current_plan(run: Run, total_steps: float | None) -> dict | None:
    """The LR plan in force: the newest re-plan whose end is the trainer's current total_steps, else the
    config's own plan (a rollback can restore an older plan, so the newest re-plan is not always the one)."""
    train, model = run.config.get("train") or {}, run.config.get("model") or {}
    try:
        first = plan.initial(train, int(train["batch_size"]) * int(model["seq_len"]))
    except (KeyError, TypeError, ValueError):
        return None
    if total_steps is None or int(total_steps) == first["total_steps"]:
        return first
    for ev in RunEvent.objects.filter(run=run, name="lr_replan").order_by("-id")[:50]:
        new = (ev.payload or {}).get("new") or {}
        if new.get("total_steps") == int(total_steps) and new.get("knots"):
            return {"total_steps": new["total_steps"], "warmup_steps": new.get("warmup_steps", 0),
                    "knots": new["knots"]}
    return first


def _stages(run: Run, values: dict) -> dict:
    stages = [s.get("name") for s in (run.manifest or {}).get("stages", []) if isinstance(s, dict)]
    stage = values.get(contract.M_MIX_STAGE)
    weights = {k[len(WEIGHT_PREFIX):]: v for k, v in values.items() if k.startswith(WEIGHT_PREFIX)}
    if not weights:  # no step published yet: the manifest's planned weights of the stage
        planned = [s for s in (run.manifest or {}).get("stages", []) if isinstance(s, dict)]
        i = int(stage) if stage is not None else 0
        weights = dict(planned[i].get("weights") or {}) if 0 <= i < len(planned) else {}
    domains = [d.get("name") for d in (run.manifest or {}).get("domains", []) if isinstance(d, dict)]
    return {"stage": None if stage is None else int(stage), "stages": stages,
            "stage_name": stages[int(stage)] if stage is not None and 0 <= int(stage) < len(stages) else None,
            "weights": weights, "domains": domains or sorted(weights)}


def recent_steering(run_ids: list[str]) -> dict[str, OperatorCommand]:
    """Each run's newest pause/resume the trainer acked in the last minute: fresher than a heartbeat sent before it."""
    since = timezone.now() - dt.timedelta(minutes=1)
    out = {}
    for c in OperatorCommand.objects.filter(run_id__in=run_ids, name__in=("pause", "resume"), status="applied",
                                            updated_at__gte=since).order_by("updated_at"):
        out[c.run_id] = c
    return out


def _state(run: Run, hb: dict | None, steer: OperatorCommand | None) -> str:
    # A live heartbeat is fresher than the database (ingest may be behind a busy stream), and an ack the trainer
    # wrote after that heartbeat is fresher still: the page says "paused" as soon as the trainer does.
    state = hb.get("phase", run.state) if hb else run.state
    if steer is not None and state in ("training", "paused", "checkpointing") and (
            hb is None or steer.updated_at.timestamp() > float(hb.get("t") or 0)):
        state = "paused" if steer.name == "pause" else "training"
    return state


def run_row(run: Run, values: dict, hb: dict | None, ckpts: dict, steer: OperatorCommand | None = None) -> dict:
    beat = hb or run.heartbeat or {}
    train = (run.config or {}).get("train") or {}
    return {
        **run.summary(),
        "state": _state(run, hb, steer),
        "step": beat.get("step", run.last_step), "tokens": beat.get("tokens"), "token_budget": beat.get("token_budget"),
        "eta_s": beat.get("eta_s"), "steps_per_s": beat.get("steps_per_s"), "heartbeat_t": beat.get("t"),
        "alive": hb is not None, "mfu": values.get(contract.M_MFU), "lr": values.get(contract.M_LR),
        "lr_multiplier": values.get(contract.M_LR_MULT), "total_steps": values.get(contract.M_TOTAL_STEPS),
        "tokens_per_s": values.get(contract.M_TOKENS_PER_S), "allow_faults": bool(train.get("allow_faults")),
        "mixture": _stages(run, values), "checkpoints": ckpts.get("checkpoints", []),
        "checkpoints_t": ckpts.get("t"),
    }


def build(sync: bool = True) -> dict:
    runs = list(controllable_runs())
    ids = [r.id for r in runs]
    if sync:
        channel.sync(ids)
    values, hbs, ckpts = latest_values(ids), heartbeats(ids), channel.checkpoints(ids)
    steer = recent_steering(ids)
    commands = OperatorCommand.objects.filter(run_id__in=ids).select_related("user__profile")[:MAX_COMMANDS]
    return json_clean({"runs": [run_row(r, values[r.id], hbs[r.id], ckpts[r.id], steer.get(r.id)) for r in runs],
                       "commands": [c.as_json() for c in commands]})
