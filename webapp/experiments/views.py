"""Experiments: every run that published a pre-registered forecast, grouped by the experiment it states.

GET /experiments/               the list: name, goal, target runs, came true or not, registration intact or not
GET /experiments/<name>/        goal, hypothesis, and per target run: forecast vs actual with a verdict once the
                                target finished (webapp/experiments/outcome.py), the ladder's fit with the target's
                                point (an SVG), the frozen forecast: law, formula, parameters
                                with their bands, predicted final loss with its band, sha256, created_at ("registered
                                before step 0 of <run>" when it was), the rung runs
GET /api/runs/<id>/forecast/    {"run_id", "verified", "problem", "published_step", "first_started",
                                 "registered_before_start", "tokens_per_step", "rungs": [{id, exists, name,
                                 tokens_per_step, series}], "experiment_url", "outcome": {status, actual, source,
                                 tokens, fraction, inside, error_pct, verdict} (outcome.py),
                                 "registration": <the record as published>}
                                404 when the run published none. Public; the record is served exactly as published
                                (not redacted: anyone can re-hash it).
"""

from __future__ import annotations

import datetime as dt

from django.http import Http404, JsonResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET

from observatory import contract
from webapp.accounts.permissions import public
from webapp.api import api_view, found
from webapp.experiments import outcome as outcome_lib
from webapp.metrics.models import Series
from webapp.runs import forecast as forecast_lib
from webapp.runs import pagedata
from webapp.runs.api import get_run
from webapp.runs.models import Run

LOSSES = (contract.M_LOSS, contract.M_EVAL_LOSS)  # the rungs' series the dashboard overlays


def _num(x) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _g(x, digits: int = 5) -> str:
    return "–" if x is None else f"{x:.{digits}g}"


def _utc(t: float | None):
    return dt.datetime.fromtimestamp(t, tz=dt.timezone.utc) if t is not None else None


def summary(reg: forecast_lib.Registration, run: Run | None) -> dict:
    """What the API answers and the pages show of one registration (tolerant of a malformed, unverified one)."""
    started = pagedata.first_started(run) if run is not None else None
    created = reg.created_at
    before = None if created is None or started is None else created < started.timestamp()
    rungs = {r.id: r for r in Run.objects.filter(pk__in=reg.rung_runs)}
    series: dict[str, list[str]] = {}
    for rid, name in (Series.objects.filter(run_id__in=list(rungs), name__in=LOSSES).order_by("name")
                      .values_list("run_id", "name")):
        series.setdefault(rid, []).append(name)
    return {
        "run_id": reg.run_id, "verified": reg.verified, "problem": reg.problem, "published_step": reg.step,
        "first_started": started.isoformat() if started else None, "registered_before_start": before,
        "tokens_per_step": forecast_lib.tokens_per_step(run) if run is not None else None,
        "rungs": [{"id": rid, "exists": rid in rungs, "name": rungs[rid].name if rid in rungs else rid,
                   "tokens_per_step": forecast_lib.tokens_per_step(rungs[rid]) if rid in rungs else None,
                   "series": series.get(rid, [])}
                  for rid in reg.rung_runs],
        "experiment_url": reverse("experiment-detail", args=[reg.name]),
        "outcome": outcome_lib.outcome(reg, run),
        "registration": reg.record,
    }


def _display(reg: forecast_lib.Registration, run: Run | None) -> dict:
    """summary() plus what the template needs in ready-made form."""
    out = summary(reg, run)
    fc = reg.forecast
    params = fc.get("params") if isinstance(fc.get("params"), dict) else {}
    bands = fc.get("bands") if isinstance(fc.get("bands"), dict) else {}
    rows = []
    for k, v in params.items():
        band = bands.get(k) if isinstance(bands.get(k), list) and len(bands.get(k)) == 2 else [None, None]
        rows.append({"name": k, "value": _g(_num(v)), "low": _g(_num(band[0])), "high": _g(_num(band[1]))})
    hero = fc.get("hero") if isinstance(fc.get("hero"), dict) else {}
    target = reg.record.get("target") if isinstance(reg.record.get("target"), dict) else {}
    level = _num(fc.get("level"))
    out.update(run=run, params=rows, hero={k: _g(_num(hero.get(k)), 3 if k in "NDC" else 5)
                                           for k in ("N", "D", "C", "loss", "low", "high")},
               has_band=_num(hero.get("low")) is not None,
               law=str(fc.get("law", "")), formula=str(fc.get("formula", "")),
               level=f"{level * 100:.3g}%" if level else "", holdout_error=_g(_num(fc.get("holdout_error")), 3),
               bootstrap=fc.get("bootstrap"),
               sha256=str(reg.record.get("sha256", "")), forecast_sha256=str(fc.get("sha256", "")),
               created=_utc(reg.created_at), config_hash=str(target.get("config_hash", "")),
               experiment=reg.experiment, name=reg.name)
    result = out["outcome"]
    out.update(outcome=result, actual=_g(result["actual"]), ladder_svg=outcome_lib.ladder_svg(reg, result),
               ladder_actual=result["status"] == "finished",
               error=None if result["error_pct"] is None else f"{result['error_pct']:+.2f}%",
               trained=None if result["fraction"] is None else f"{100 * result['fraction']:.0f}%")
    return out


def _result_line(reg: forecast_lib.Registration, run: Run | None) -> str:
    """One line of the list's "Came true?" column: the verdict once the target finished, else where it is."""
    r = outcome_lib.outcome(reg, run)
    err = "" if r["error_pct"] is None else f" ({r['error_pct']:+.1f}%)"
    if r["status"] == "finished":
        return r["verdict"] + err
    if r["status"] == "short":
        return "stopped short of its token budget: no verdict"
    if r["status"] == "training":
        return "training" + (f", {100 * r['fraction']:.0f}% of its tokens" if r["fraction"] is not None else "")
    return "not started" if r["status"] == "waiting" else "target not on this site"


@public
@require_GET
def experiment_list(request):
    groups: dict[str, list] = {}
    for reg in forecast_lib.all_latest():
        groups.setdefault(reg.name, []).append(reg)
    runs = {r.id: r for r in Run.objects.filter(pk__in=[reg.run_id for regs in groups.values() for reg in regs])}
    rows = [{"name": name, "experiment": regs[0].experiment, "runs": [r.run_id for r in regs],
             "verified": all(r.verified for r in regs), "created": _utc(regs[0].created_at),
             "results": [_result_line(reg, runs.get(reg.run_id)) for reg in regs]}
            for name, regs in groups.items()]
    return render(request, "experiments/list.html", {"rows": rows})


@public
@require_GET
def experiment_detail(request, name: str):
    regs = [r for r in forecast_lib.all_latest() if r.name == name]
    if not regs:
        raise Http404(f"no experiment named {name!r}")
    runs = {r.id: r for r in Run.objects.filter(pk__in=[reg.run_id for reg in regs])}
    entries = [_display(reg, runs.get(reg.run_id)) for reg in regs]
    return render(request, "experiments/detail.html", {"name": name, "experiment": regs[0].experiment,
                                                       "entries": entries})


@public
@api_view
def run_forecast(request, run_id: str):
    run = get_run(run_id)
    reg = found(forecast_lib.latest(run.id), f"run {run.id!r} has published no forecast")
    return JsonResponse(summary(reg, run))
