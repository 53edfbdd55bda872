"""What the front page shows besides moments: the featured run (its loss, forecast band, state and ETA) and the
experiments with their frozen forecasts."""

from __future__ import annotations

from django.urls import reverse

from observatory import contract
from webapp.metrics import api as metrics_api
from webapp.metrics.models import Series
from webapp.runs import forecast as forecast_lib
from webapp.runs import pagedata
from webapp.runs.models import ENDED_STATES, IMPORTED_SOURCES, Health, Run

POINTS = 800  # the front chart is at most ~1,100 px wide: a bucket's min and max per ~1.4 px
EXPERIMENTS = 6


def featured_run() -> Run | None:
    """The run a visitor should see first: a live one heard from (newest first), else the newest run."""
    runs = Run.objects.for_list()
    live = runs.exclude(state__in=ENDED_STATES).exclude(source__in=IMPORTED_SOURCES)
    return (live.filter(health=Health.ALIVE).first() or live.first() or runs.first())


def status(run: Run) -> dict:
    """State, step, progress and ETA: what the featured run's header shows and /api/front/ refreshes."""
    return {**run.summary(), "progress": pagedata.progress(run),
            "url": reverse("run-dashboard", args=[run.id])}


def band(run: Run, reg) -> dict | None:
    """The verified frozen forecast as a band over this run's steps (webapp.runs.forecast.band_over_steps)."""
    return forecast_lib.band_over_steps(run, reg)


HELD_OUT_POINTS = 5  # held-out evaluations a run needs before its band is drawn on them rather than on train/loss


def chart(run: Run) -> dict:
    """The featured run's loss window (whole run) and forecast band, for first paint without an API round trip.
    With a band, the held-out loss once the run has a few evaluations (the band reads clearly there; the train loss
    is noisy), else the training loss."""
    b = band(run, forecast_lib.latest(run.id))
    name = contract.M_LOSS
    if b is not None and Series.objects.filter(run=run, name=contract.M_EVAL_LOSS,
                                               count__gte=HELD_OUT_POINTS).exists():
        name = contract.M_EVAL_LOSS
    loss = Series.objects.filter(run=run, name=name).first()
    window = metrics_api.series_window(run, loss, 0, metrics_api.MAX_STEP, POINTS) if loss else None
    return {"metric": name, "window": window, "band": b}


def experiments() -> list[dict]:
    """The newest experiments' registrations: goal, run, forecast final loss and its band."""
    out = []
    regs = forecast_lib.all_latest(limit=EXPERIMENTS)
    runs = {r.id: r for r in Run.objects.filter(pk__in=[g.run_id for g in regs])}
    for reg in regs:
        hero = reg.forecast.get("hero") if isinstance(reg.forecast.get("hero"), dict) else {}
        run = runs.get(reg.run_id)
        out.append({"name": reg.name, "goal": reg.experiment["goal"], "hypothesis": reg.experiment["hypothesis"],
                    "run_id": reg.run_id, "run_name": (run.name if run else "") or reg.run_id,
                    "state": run.state if run else "unknown", "verified": reg.verified,
                    "forecast": {k: _num(hero.get(k)) for k in ("loss", "low", "high")},
                    "url": reverse("experiment-detail", args=[reg.name]),
                    "run_url": reverse("run-dashboard", args=[reg.run_id])})
    return out


def _num(x):
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None
