"""Exports (series streamed as CSV/JSON/Parquet; a run's records as JSON), the events list, the API's schema
and its browsable page. All public reads, with the visibility the rest of the API has."""

from __future__ import annotations

import json

from django.http import JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET
from django_ratelimit.decorators import ratelimit

from webapp.accounts.permissions import can, public
from webapp.annotations.access import Viewer, annotation_records
from webapp.anomalies.models import Anomaly
from webapp.api import StreamedResponse, api_view
from webapp.pagination import after_cursor, page
from webapp.publicapi import openapi
from webapp.runs.api import get_run
from webapp.runs.models import RunEvent
from webapp.transfer import exports

RECORD_CHUNK = 500  # events / anomalies / annotations per query of the records export
EXPORT_RATE = "60/m"  # export requests per user (or address), all exports together; past it: 429


@public
@ratelimit(key="user_or_ip", rate=EXPORT_RATE, block=True, group="exports")
@api_view
def export_series(request, run_id: str, fmt: str):
    run = get_run(run_id)
    return exports.response(exports.Plan(request, run), fmt)


@public
@api_view
def events(request, run_id: str):
    """A run's event log, oldest first: `?limit=` (default 200, at most 1000), `?cursor=` from `next`."""
    run = get_run(run_id)
    full = can(request.user, "run.failure_detail")
    rows, nxt = page(request, RunEvent.objects.filter(run=run), ["id"], 200, 1000)
    return JsonResponse({"run_id": run.id, "events": [e.as_dict(full) for e in rows], "next": nxt})


def _keyset(qs, order, convert):
    """Every row of qs in `order` (unique last field), RECORD_CHUNK per query, converted chunk by chunk."""
    qs, cur = qs.order_by(*order), None
    while True:
        part = list((qs.filter(after_cursor(qs, order, cur)) if cur else qs)[:RECORD_CHUNK])
        if not part:
            return
        yield convert(part)
        if len(part) < RECORD_CHUNK:
            return
        cur = [getattr(part[-1], f.lstrip("-")) for f in order]


def _records(request, run):
    full = can(request.user, "run.failure_detail")
    who = can(request.user, "anomaly.acknowledge")
    viewer = Viewer.of(request)
    yield json.dumps({"run": run.detail(full), "full_detail": full})[:-1].encode()
    sections = [
        ("events", RunEvent.objects.filter(run=run), ["id"], lambda rows: [e.as_dict(full) for e in rows]),
        ("anomalies", Anomaly.objects.filter(run=run).select_related("acknowledged_by", "resolved_by"),
         ["start_step", "id"], lambda rows: [a.as_json(who) for a in rows]),
        ("annotations", viewer.annotations().filter(run=run).select_related("author", "hidden_by"),
         ["step_start", "id"], lambda rows: annotation_records(rows, viewer.moderate)),
    ]
    for name, qs, order, convert in sections:
        yield f', "{name}": ['.encode()
        first = True
        for items in _keyset(qs, order, convert):
            body = ", ".join(json.dumps(x) for x in items)
            yield (body if first else ", " + body).encode()
            first = False
        yield b"]"
    yield b"}"


@public
@ratelimit(key="user_or_ip", rate=EXPORT_RATE, block=True, group="exports")
@api_view
def export_records(request, run_id: str):
    """{"run", "full_detail", "events", "anomalies", "annotations"}: everything but the series, streamed."""
    run = get_run(run_id)
    resp = StreamedResponse(_records(request, run), content_type="application/json")
    resp["Content-Disposition"] = f'attachment; filename="{run.id}-records.json"'
    resp["Cache-Control"] = "no-cache"
    return resp


@public
@api_view
def schema(request):
    return JsonResponse(openapi.document(), json_dumps_params={"indent": 1})


@public
@require_GET
def docs(request):
    """The browsable reference, rendered here from the schema's document (no script at all)."""
    return render(request, "publicapi/docs.html", {"schema_url": "/api/schema/", "ref": openapi.reference()})
