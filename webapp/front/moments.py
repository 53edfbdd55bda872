"""The moment sources this project has (runs.moments registry): anomalies, annotations, operator interventions.

Each answers the newest public ones across runs, with a link to the run's chart at that step. A later app (reports)
registers its own source the same way, from its own AppConfig.ready().
"""

from __future__ import annotations

from urllib.parse import urlencode

from html import unescape

from django.db.models import Count, Q
from django.utils.html import strip_tags
from django.urls import reverse

from webapp.annotations.models import Annotation
from webapp.anomalies.models import Anomaly
from webapp.control import outcomes
from webapp.control.models import OperatorCommand
from webapp.runs.models import Run

DETAIL_CHARS = 160
INTERVENTION_RUNS = 5  # commands are read per run (acks from Redis): the runs most recently commanded
CONTEXT_STEPS = 20  # a one-step moment's chart window: this much either side


def plain(html: str) -> str:
    """A sanitised post's HTML as one line of plain text (the page escapes it again)."""
    return " ".join(unescape(strip_tags(html or "")).split())


def _cut(text: str) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= DETAIL_CHARS else text[:DETAIL_CHARS - 1] + "…"


def chart_url(run_id: str, lo: int, hi: int, **extra) -> str:
    """The run's dashboard showing steps [lo, hi] (static/js/view.js reads ?from=&to=)."""
    return f"{reverse('run-dashboard', args=[run_id])}?{urlencode({'from': lo, 'to': hi, **extra})}"


def _window(a: int, b: int) -> tuple[int, int]:
    pad = max(CONTEXT_STEPS, (b - a) // 2)
    return max(0, a - pad), b + pad


def _iso(t) -> str | None:
    return t.isoformat() if t else None


def anomalies(limit: int) -> list[dict]:
    # newest first by primary key: ids follow creation, and the key's index serves it (no index on created_at)
    rows = Anomaly.objects.filter(superseded=False).select_related("run").order_by("-id")[:limit]
    out = []
    for a in rows:
        lo, hi = a.zoom()
        out.append({"kind": "anomaly", "id": str(a.id), "run_id": a.run_id, "run_name": a.run.name or a.run_id,
                    "step": a.peak_step, "from": lo, "to": hi, "severity": a.severity,
                    "title": a.kind.replace("_", " ") + (f" on {a.metric}" if "/" in a.metric else ""),
                    "detail": _cut(a.explanation), "count": None, "t": _iso(a.created_at),
                    "url": chart_url(a.run_id, lo, hi, anomaly=a.id)})
    return out


def annotations(limit: int) -> list[dict]:
    rows = (Annotation.objects.public().select_related("run").order_by("-id")  # as anomalies: the key's index
            .annotate(n_replies=Count("replies", filter=Q(replies__hidden=False, replies__deleted_at__isnull=True)))
            [:limit])
    out = []
    for n in rows:
        lo, hi = _window(n.step_start, n.step_end)
        out.append({"kind": "annotation", "id": str(n.id), "run_id": n.run_id, "run_name": n.run.name or n.run_id,
                    "step": n.step_start, "from": lo, "to": hi, "title": n.title, "detail": _cut(plain(n.body_html)),
                    "count": n.n_replies, "t": _iso(n.created_at),
                    "url": chart_url(n.run_id, lo, hi, annotation=n.id)})
    return out


def interventions(limit: int) -> list[dict]:
    # commands are few (operators send them by hand): a scan by created_at across runs is cheap
    run_ids = list(OperatorCommand.objects.values_list("run_id", flat=True).order_by("-created_at").distinct()[:50])
    seen: list[str] = []
    for r in run_ids:  # distinct() over an ordered queryset repeats ids on some databases: keep the first of each
        if r not in seen:
            seen.append(r)
    names = dict(Run.objects.filter(pk__in=seen[:INTERVENTION_RUNS]).values_list("id", "name"))
    out = []
    for run_id in seen[:INTERVENTION_RUNS]:
        for c in outcomes.applied(run_id, limit):
            if c.step is None:
                continue
            lo, hi = _window(c.step, c.step)
            out.append({"kind": "intervention", "id": c.id, "run_id": run_id,
                        "run_name": names.get(run_id) or run_id, "step": c.step, "from": lo, "to": hi,
                        "title": c.name + (" (undone)" if c.undone_by else ""), "detail": _cut(c.reason),
                        "operator": c.operator_name(True), "count": None, "t": _iso(c.created_at),
                        "url": chart_url(run_id, lo, hi)})
    return out


SOURCES = (anomalies, annotations, interventions)
