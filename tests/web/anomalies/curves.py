"""Test curves for the anomaly log: real-shaped metrics with faults at known steps, as rows, messages and CSV."""

from __future__ import annotations

import csv
import math
import random

from observatory import contract

SPIKES = (300, 520)  # loss spikes (x1.6 for SPIKE_STEPS steps: critical at their third point; a log of every step
SPIKE_STEPS = 3       # keeps a one-point outlier at info, docs/ANOMALIES.md)
NAN_AT = 420  # a non-finite loss and grad norm (critical)
GRAD_SPIKE = 650  # grad norm x12 for one point (info: back at the next point)
COLUMNS = (contract.M_LOSS, contract.domain_loss("web"), contract.M_GRAD_NORM, contract.M_TOKENS_PER_S,
           contract.M_FINITE)


def rows(n: int = 800, seed: int = 3) -> list[tuple[int, dict, float]]:
    """(step, values, t): a falling loss with noise, faults at SPIKES, NAN_AT and GRAD_SPIKE."""
    rnd = random.Random(seed)
    out, t = [], 1_700_000_000.0
    for s in range(n):
        loss = (2.0 + 8.5 * (1 + s / 20) ** -0.47) * (1 + rnd.uniform(-0.01, 0.01))
        if any(0 <= s - sp < SPIKE_STEPS for sp in SPIKES):
            loss *= 1.6
        grad = 0.5 * math.exp(rnd.gauss(0, 0.1)) * (12 if s == GRAD_SPIKE else 1)
        v = {contract.M_LOSS: loss, contract.domain_loss("web"): loss * 1.1 * (1 + rnd.uniform(-0.01, 0.01)),
             contract.M_GRAD_NORM: grad, contract.M_TOKENS_PER_S: 12_000 * (1 + rnd.gauss(0, 0.01)),
             contract.M_FINITE: 1.0}
        if s == NAN_AT:
            v[contract.M_LOSS] = v[contract.M_GRAD_NORM] = math.nan
            v[contract.M_FINITE] = 0.0
        t += 0.2
        out.append((s, v, t))
    return out


def write_csv(path, data, time_column: bool = False) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step", *(["time"] if time_column else []), *COLUMNS])
        for step, v, t in data:
            w.writerow([step, *([repr(t)] if time_column else []), *(repr(v[c]) for c in COLUMNS)])


def started(trainer, servers, name: str, data) -> None:
    """A run of `name` in training with `data`'s rows ingested and the web server up (a page opened next sees it
    live, the rows published after it coming as live frames)."""
    from ..servers import wait_ingested

    trainer.send("run", name=name, config={})
    trainer.send("state", state="training", step=0, detail="")
    publish(trainer, data)
    wait_ingested(trainer.run_id, data[-1][0])
    servers.wait_web()


def publish(trainer, data) -> None:
    """Onto the run's stream as the trainer publishes them (one metrics message per step)."""
    pipe = trainer.r.pipeline(transaction=False)
    for step, v, t in data:
        pipe.xadd(trainer.stream, contract.metrics_fields(trainer.run_id, step, v, t))
    pipe.execute()


def stored(run_id: str, superseded: bool = False) -> list[tuple]:
    """The run's anomaly log as comparable tuples, oldest episode first."""
    from webapp.anomalies.models import Anomaly

    qs = Anomaly.objects.filter(run_id=run_id)
    if not superseded:
        qs = qs.filter(superseded=False)
    return sorted((a.kind, a.metric, a.start_step, a.peak_step, a.end_step, a.severity) for a in qs)


def scanned(found) -> list[tuple]:
    """observatory scan results (Anomaly records or their JSON) as the same tuples."""
    out = []
    for a in found:
        d = a if isinstance(a, dict) else a.to_dict()
        out.append((d["kind"], d["metric"], d["start_step"], d["peak_step"], d["end_step"], d["severity"]))
    return sorted(out)
