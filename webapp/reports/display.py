"""What a report's blocks show, read when the page is served: chart specs for static/js/minichart.js, the public
record of an annotation (with its thread summary) or anomaly, a run's forecast summary, a comparison."""

from __future__ import annotations

from urllib.parse import urlencode

from django.db.models import Max
from django.urls import reverse

from webapp.annotations.access import annotation_record
from webapp.annotations.models import Annotation, Reply
from webapp.anomalies.models import Anomaly
from webapp.runs import forecast
from webapp.runs.models import Run, RunEvent

THREAD_SUMMARY = 3  # replies quoted under an annotation block (the latest ones); the rest are a link away


def run_url(run_id: str, start: int | None = None, end: int | None = None, chart: str | None = None,
            annotation: int | None = None) -> str:
    """The run's dashboard showing `chart` over [start, end] (and annotation's thread open)."""
    q: dict = {"annotation": annotation} if annotation is not None else {}
    if chart:
        q["chart"] = chart
    if start is not None and end is not None and end > start:
        q.update({"from": start, "to": end})
    url = reverse("run-dashboard", args=[run_id])
    return url + ("?" + urlencode(q) if q else "")


def chart_spec(runs: list[str], series: str, start, end) -> dict:
    """One minichart: the same shape for a report's block and an embed (minichart.js reads it)."""
    return {"runs": runs, "series": series, "start": start, "end": end}


def _chart(p: dict) -> dict:
    return {**p, "spec": chart_spec([p["run"]], p["series"], p["start"], p["end"]),
            "link": run_url(p["run"], p["start"], p["end"], p["series"])}


def _compare(p: dict) -> dict:
    return {**p, "spec": chart_spec(p["runs"], p["series"], p["start"], p["end"]),
            "link": reverse("compare") + "?" + urlencode({"runs": ",".join(p["runs"])})}


def _annotation(p: dict) -> dict:
    a = Annotation.objects.public().select_related("author").filter(pk=p["id"]).first()
    if a is None:
        return {**p, "gone": True}
    replies = list(Reply.objects.public().filter(annotation=a).select_related("author").order_by("-id")
                   [:THREAD_SUMMARY])[::-1]
    return {**p, "record": annotation_record(a), "replies": replies,
            "link": run_url(a.run_id, a.step_start, max(a.step_end, a.step_start + 1), a.metric or None, a.id)}


def _anomaly(p: dict) -> dict:
    an = Anomaly.objects.filter(pk=p["id"]).first()
    if an is None:
        return {**p, "gone": True}
    lo, hi = an.zoom()
    notes = [{"title": n["title"], "link": run_url(an.run_id, annotation=n["id"])}
             for n in Annotation.objects.public().filter(anomaly=an).order_by("id").values("id", "title")[:5]]
    return {**p, "record": an.as_json(), "notes": notes, "link": run_url(an.run_id, lo, hi, an.metric or None),
            "log": reverse("run-anomalies", args=[an.run_id])}


def _forecast(p: dict) -> dict:
    reg = forecast.latest(p["run"])
    out = {**p, "spec": chart_spec([p["run"]], "train/loss", None, None), "link": run_url(p["run"])}
    if reg is None:
        return {**out, "none": True}
    return {**out, "verified": reg.verified, "problem": reg.problem, "experiment": reg.experiment,
            "forecast": {k: v for k, v in reg.forecast.items() if isinstance(v, (int, float, str))},
            "experiment_url": reverse("experiment-detail", args=[reg.name])}


BUILDERS = {"chart": _chart, "compare": _compare, "annotation": _annotation, "anomaly": _anomaly,
            "forecast": _forecast}


def blocks(parts: list[dict]) -> list[dict]:
    """The parts ready for templates/reports/_part.html; a block whose run has since gone says so."""
    known = set(Run.objects.filter(pk__in=[r for p in parts for r in ([p["run"]] if "run" in p else p.get("runs", []))])
                .values_list("pk", flat=True))
    out, n = [], 0
    for p in parts:
        if p["kind"] == "markdown":
            out.append(p)
        elif not all(r in known for r in ([p["run"]] if "run" in p else p.get("runs", []))):
            out.append({**p, "gone": True})
        else:
            shown = BUILDERS[p["kind"]](p)
            if "spec" in shown:  # its index in the page data's `charts` (charts() below keeps this order)
                shown["chart_index"], n = n, n + 1
            out.append(shown)
    return out


def charts(shown: list[dict]) -> list[dict]:
    """The chart specs of the shown blocks, in page order (the page data minichart.js starts from)."""
    return [b["spec"] for b in shown if "spec" in b and not b.get("gone")]


def live_start(specs: list[dict]) -> dict:
    """{run id: its newest event id}: what a chart's live socket resumes events (and so rewinds) after."""
    runs = {r for spec in specs for r in spec["runs"]}
    rows = RunEvent.objects.filter(run_id__in=runs).values("run_id").annotate(last=Max("id"))
    return {r: 0 for r in runs} | {row["run_id"]: row["last"] for row in rows}
