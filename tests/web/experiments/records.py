"""Forecast registrations for the web tests, built as the trainer builds them: a synthetic ladder fitted with
observatory.scaling, frozen with make_forecast, wrapped and hashed with canonical_json."""

from __future__ import annotations

import hashlib
import json

import numpy as np

from observatory import contract
from observatory.scaling import Points, canonical_json, fit_law, make_forecast

N, D = 2e7, 4e9  # the target: hero C = 6·N·D = 4.8e17 (floats >= 1e16: PostgreSQL's jsonb reads them back as ints)
BATCH, SEQ = 1000, 10_000  # 1e7 tokens a step: D in 400 steps
TPS = BATCH * SEQ
CONFIG = {"train": {"batch_size": BATCH, "token_budget": D}, "model": {"seq_len": SEQ}}
STARTED = 1_700_000_000.0  # what tests/web/conftest.py's Trainer stamps on every message


def hashed(rec: dict) -> dict:
    rec = json.loads(canonical_json({k: v for k, v in rec.items() if k != "sha256"}))
    rec["sha256"] = hashlib.sha256(canonical_json(rec).encode()).hexdigest()
    return rec


def registration(run_id: str, *, rungs=("rung-a", "rung-b"), created_at: float = STARTED - 3600,
                 name: str = "ladder-demo", bootstrap: int = 20) -> dict:
    C = np.geomspace(1e15, 1e17, 5)
    loss = (1.8 + 60 * C**-0.1) * np.exp(np.random.default_rng(0).normal(0, 0.002, len(C)))
    fc = make_forecast(fit_law("compute", Points.of(C=C), loss, bootstrap=bootstrap, seed=0), N, D)
    return hashed({"kind": "observatory.forecast_registration", "version": 1,
                   "experiment": {"name": name, "goal": "Forecast the demo's final loss from 5 rungs",
                                  "hypothesis": "The compute law extrapolates 5x within 2%"},
                   "forecast": fc.to_dict(), "rung_runs": list(rungs),
                   "target": {"config_hash": "ab" * 32, "run_id": run_id, "N": N, "D": D, "x": "tokens"},
                   "created_at": created_at})


def curve_at(reg: dict, tokens: float) -> float:
    c = reg["forecast"]["curve"]
    return float(np.interp(np.log(max(tokens, c["tokens"][0])), np.log(c["tokens"]), c["loss"]))


def publish(trainer, reg: dict, *, name: str = "hero") -> None:
    """A target run's start as the trainer tells it: run, state, then its forecast at step 0."""
    trainer.send("run", name=name, config=CONFIG, started_at=STARTED)
    trainer.send("state", state="training", step=0, detail="")
    trainer.send("event", step=0, name="forecast", payload=reg)


def metrics(trainer, reg: dict, steps, shape=lambda f: 1.0) -> None:
    """train/loss = forecast(tokens) · shape(tokens / D), with the token count, for each step."""
    for s in steps:
        t = s * TPS
        trainer.metrics_named(s, {contract.M_LOSS: curve_at(reg, t) * shape(t / D),
                                  contract.M_TOTAL_TOKENS: float(t)})
