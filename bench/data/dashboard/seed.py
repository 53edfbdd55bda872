"""The dashboard bench's data set (bench/dashboard.py; measures nothing): a long synthetic run of seven series (noisy
decays, a warm-up and cosine learning rate, a one-step loss spike) and, for --front, a featured run with an anomaly
and an annotation beside many other runs, written into the database through the ingest path's storage."""

from __future__ import annotations

import math
import random

from stack import load_series

RUN_ID, FRONT_ID = "bench-dashboard", "bench-front"
SERIES = ("train/loss", "train/cross_entropy_loss", "optim/learning_rate", "grad/norm/total",
          "throughput/tokens_per_second", "moe/drop_fraction", "throughput/total_tokens")
SPIKE_OFFSET = 123_457  # a one-step loss spike at this step (if the run is long enough)


def value(name: str, step: int, rnd: random.Random) -> float:
    if name == "throughput/total_tokens":
        return float((step + 1) * 4096)
    if name == "optim/learning_rate":
        return 3e-4 * min(1.0, step / 2000) * (0.1 + 0.9 * (1 + math.cos(math.pi * step / 1e6)) / 2)
    decay = 3.0 / math.sqrt(1 + step / 500)
    base = {"train/loss": 2.0 + decay, "train/cross_entropy_loss": 1.9 + decay, "grad/norm/total": 0.6,
            "throughput/tokens_per_second": 5.2e4, "moe/drop_fraction": 0.02}[name]
    return base * (1 + 0.05 * rnd.gauss(0, 1))


def seed(steps: int) -> bool:
    """The run with `steps` points per series, loaded once (False: it was there)."""
    from webapp.metrics.models import Series
    from webapp.runs.models import Run

    if Series.objects.filter(run_id=RUN_ID, count=steps).count() == len(SERIES):
        return False
    Run.objects.filter(pk=RUN_ID).delete()
    run = Run.objects.create(id=RUN_ID, name="dashboard benchmark", state="training", health="ended",
                             last_step=steps - 1, heartbeat={"tokens": steps * 4096, "token_budget": 2 * steps * 4096,
                                                            "steps_per_s": 4.0, "eta_s": steps / 4.0})
    spike = SPIKE_OFFSET % steps
    for name in SERIES:
        rnd = random.Random(name)
        load_series(run, name, ((step, v * 40 if name == "train/loss" and step == spike else v)
                                for step in range(steps) for v in (value(name, step, rnd),)))
    return True


def seed_front(steps: int, runs: int) -> None:
    """--front: the featured run (its loss, an anomaly, an annotation) and `runs` more, loaded once."""
    from webapp.anomalies.models import Anomaly
    from webapp.annotations.models import Annotation
    from webapp.metrics.models import Series
    from webapp.runs.models import Run

    if Series.objects.filter(run_id=FRONT_ID, name="train/loss", count=steps).exists():
        return
    Run.objects.filter(pk__startswith=FRONT_ID).delete()
    hb = {"tokens": steps * 4096, "token_budget": 2 * steps * 4096, "eta_s": 3600.0, "steps_per_s": 4.0}
    run = Run.objects.create(id=FRONT_ID, name="front-page benchmark", state="training", health="alive",
                             last_step=steps - 1, heartbeat=hb)
    load_series(run, "train/loss", ((i, 2.0 + 3.0 / math.sqrt(1 + i / 500)) for i in range(steps)))
    Anomaly.objects.create(run=run, key="loss_spike train/loss 77", kind="loss_spike", metric="train/loss",
                           start_step=77, peak_step=77, detected_step=77, severity="warning", score=3.0,
                           explanation="loss 9 at step 77 is 3x its running level")
    Annotation.objects.create(run=run, title="spike at 77", body="a bad batch?", body_html="<p>a bad batch?</p>",
                              step_start=70, step_end=80)
    for i in range(runs):
        Run.objects.create(id=f"{FRONT_ID}-{i:03d}", name=f"other {i}", state="stopped", health="ended",
                           last_step=1000 + i)
