"""A run's pre-registered forecast, as the web reads it: the latest `forecast` event, verified, never trusted blind.

The trainer publishes its forecast registration (observatory.scaling.registration: experiment, frozen forecast,
rung run ids, target, created_at, sha256) as an event named "forecast" at its current step on every (re)start;
ingest stores it like any event (RunEvent). Here it is read back and checked: the record must verify (its shape,
its own hash and its forecast's hash: `registration.verify`) and name this run as its target. A record that does
not is returned with `verified=False` and the reason; pages show it as "unverified" and the detector ignores it.

Stored JSON and hashes: PostgreSQL's jsonb keeps numbers as decimals and prints a float such as 1e+16 back as the
integer 10000000000000000, which would hash differently; integers of 1e16 and beyond (no record field is a real
integer that large) are read as floats before verifying.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Max
from django.urls import reverse

from observatory.scaling import registration as reg_lib
from webapp.runs.models import Run, RunEvent

EVENT_NAME = "forecast"
_FLOAT_FROM = 10**16


@dataclass
class Registration:
    run_id: str  # the run that published it
    record: dict  # the payload as published (unredacted: its hash covers every byte of it)
    verified: bool
    problem: str | None  # why it is not verified
    step: int | None  # the step the trainer published it at
    event_id: int
    published_at: object = None  # datetime of the event

    @property
    def experiment(self) -> dict:
        exp = self.record.get("experiment") if isinstance(self.record, dict) else None
        exp = exp if isinstance(exp, dict) else {}
        return {k: str(exp.get(k) or "") for k in ("name", "goal", "hypothesis")}

    @property
    def name(self) -> str:
        """The experiment's name, or the run's id for a record without one (the key of /experiments/<name>/)."""
        return self.experiment["name"].strip() or self.run_id

    @property
    def forecast(self) -> dict:
        fc = self.record.get("forecast") if isinstance(self.record, dict) else None
        return fc if isinstance(fc, dict) else {}

    @property
    def rung_runs(self) -> list[str]:
        rungs = self.record.get("rung_runs") if isinstance(self.record, dict) else None
        return [str(r) for r in rungs] if isinstance(rungs, list) else []

    @property
    def created_at(self) -> float | None:
        t = self.record.get("created_at") if isinstance(self.record, dict) else None
        return float(t) if isinstance(t, (int, float)) and not isinstance(t, bool) else None


def _floats(x):
    if isinstance(x, bool):
        return x
    if isinstance(x, int) and abs(x) >= _FLOAT_FROM:
        return float(x)
    if isinstance(x, dict):
        return {k: _floats(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_floats(v) for v in x]
    return x


def check(payload, run_id: str) -> tuple[bool, str | None]:
    """(verified, problem): the record verifies and targets `run_id`."""
    try:
        reg_lib.verify(_floats(payload))
    except ValueError as e:
        return False, str(e)
    except (TypeError, KeyError, AttributeError) as e:  # a malformed record that verify did not expect
        return False, f"forecast registration: malformed ({type(e).__name__}: {e})"
    target = payload["target"].get("run_id")
    if target != run_id:
        return False, f"registered for run {target!r}, published by run {run_id!r}"
    return True, None


def tokens_per_step(run: Run) -> float | None:
    """batch_size × seq_len from the run's config (None when it does not say)."""
    cfg = run.config if isinstance(run.config, dict) else {}
    train, model = cfg.get("train"), cfg.get("model")
    try:
        v = float(train["batch_size"]) * float(model["seq_len"])
    except (TypeError, KeyError, ValueError):
        return None
    return v if v > 0 else None


def band_over_steps(run: Run, reg: Registration | None) -> dict | None:
    """The verified frozen forecast as a band over this run's steps (tokens / tokens per step), or None: what the
    front page and the run page draw on the live loss, whichever renderer draws it. {"steps", "loss", "low", "high",
    "experiment_url", "sha256"} (the registration's hash: the detector watches the same band)."""
    if reg is None or not reg.verified:
        return None
    curve = reg.forecast.get("curve")
    tps = tokens_per_step(run)
    if not isinstance(curve, dict) or not tps:
        return None
    tokens, loss = curve.get("tokens"), curve.get("loss")
    low, high = curve.get("low") or loss, curve.get("high") or loss
    if not all(isinstance(x, list) and len(x) == len(tokens or []) for x in (loss, low, high)) or not tokens:
        return None
    return {"steps": [t / tps for t in tokens], "loss": loss, "low": low, "high": high,
            "experiment_url": reverse("experiment-detail", args=[reg.name]), "sha256": reg.record.get("sha256")}


def of_event(ev: RunEvent) -> Registration:
    payload = ev.payload if isinstance(ev.payload, dict) else {}
    ok, problem = check(payload, ev.run_id)
    return Registration(ev.run_id, payload, ok, problem, ev.step, ev.id, ev.t)


def latest(run_id: str) -> Registration | None:
    """The run's latest published forecast, verified or not; None if it never published one."""
    ev = (RunEvent.objects.filter(run_id=run_id, kind=RunEvent.KIND_EVENT, name=EVENT_NAME)
          .order_by("-id").first())
    return of_event(ev) if ev is not None else None


def published(run_id: str) -> bool:
    return RunEvent.objects.filter(run_id=run_id, kind=RunEvent.KIND_EVENT, name=EVENT_NAME).exists()


def all_latest(limit: int = 500) -> list[Registration]:
    """The latest forecast of every run that published one (newest first; at most `limit` runs)."""
    ids = (RunEvent.objects.filter(kind=RunEvent.KIND_EVENT, name=EVENT_NAME).values("run_id")
           .annotate(last=Max("id")).order_by("-last").values_list("last", flat=True)[:limit])
    return [of_event(ev) for ev in RunEvent.objects.filter(id__in=list(ids)).order_by("-id")]
