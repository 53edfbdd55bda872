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


GROUP_STEPS = 50  # anomalies of one kind on one run starting within this many steps: one moment (one cause)
GROUP_SCAN = 8  # anomalies read per moment asked for (a fault trips one kind on many series at once)
_SEV = {"info": 0, "warning": 1, "critical": 2}


def _group(rows) -> list[list]:
    """Anomalies (newest first) folded into groups of one kind on one run whose starts lie within GROUP_STEPS of
    the group's first: one injected fault spiking every domain's loss is one group."""
    groups: list[list] = []
    open_: dict[tuple, list] = {}
    for a in rows:
        k = (a.run_id, a.kind)
        g = open_.get(k)
        if g is not None and abs(g[0].start_step - a.start_step) <= GROUP_STEPS:
            g.append(a)
            continue
        open_[k] = g = [a]
        groups.append(g)
    return groups


def anomalies(limit: int) -> list[dict]:
    # newest first by primary key: ids follow creation, and the key's index serves it (no index on created_at)
    rows = Anomaly.objects.filter(superseded=False).select_related("run").order_by("-id")[:limit * GROUP_SCAN]
    out = []
    for g in _group(rows)[:limit]:
        worst = max(g, key=lambda a: (_SEV.get(a.severity, 0), a.score))
        zooms = [a.zoom() for a in g]
        lo, hi = min(z[0] for z in zooms), max(z[1] for z in zooms)
        metrics = sorted({a.metric for a in g})
        kind = worst.kind.replace("_", " ")
        if len(metrics) > 1:
            title = f"{kind} on {len(metrics)} series"
            detail = _cut(worst.explanation + " · also " + ", ".join(m for m in metrics if m != worst.metric))
        else:
            title = kind + (f" on {worst.metric}" if "/" in worst.metric else "")
            detail = _cut(worst.explanation)
        out.append({"kind": "anomaly", "id": str(worst.id), "run_id": worst.run_id,
                    "run_name": worst.run.name or worst.run_id, "step": min(a.peak_step for a in g),
                    "from": lo, "to": hi, "severity": worst.severity, "title": title, "detail": detail,
                    "count": None, "n": len(g), "t": _iso(max(a.created_at for a in g)),
                    # info (a host notice, a per-domain blip) is context: below what a visitor should see first
                    "rank": 1 if worst.severity == "info" else 0,
                    "url": chart_url(worst.run_id, lo, hi, anomaly=worst.id)})
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
