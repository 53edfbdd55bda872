"""Applying validated contract messages to the database: runs, events, points, rewinds. One call per batch.

Everything here is idempotent when replayed (ingest may see an entry again after a crash before XACK): points are
upserts on (series, step), run fields are overwritten, and events are keyed by the stream entry id. Ingest and the
W&B importer both write through apply_messages.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable

from django.utils import timezone

from observatory import contract
from observatory.downsample import classify
from webapp.metrics import storage
from webapp.metrics.changes import RunChanges
from webapp.metrics.models import Series
from webapp.runs.models import Run, RunEvent


def apply_messages(items: Iterable[tuple[str, contract.Message]], source: str = "stream") -> dict[str, RunChanges]:
    """(stream entry id, message) pairs in stream order -> what changed, per run. Call inside atomic().

    An empty entry id means "not from a stream" (an import): its events are recorded without a replay key.
    `source` is recorded on runs described by a `run` message ("stream": a live trainer, "wandb": imported)."""
    by_run: dict[str, list[tuple[str, contract.Message]]] = defaultdict(list)
    for entry_id, msg in items:
        by_run[msg.run].append((entry_id, msg))
    writer = storage.SeriesWriter()
    changes = {run_id: _apply_run(run_id, msgs, writer, source) for run_id, msgs in by_run.items()}
    writer.flush()
    return changes


def _apply_run(run_id: str, msgs: list[tuple[str, contract.Message]], writer: storage.SeriesWriter,
               source: str) -> RunChanges:
    run = Run.objects.for_ingest(run_id)
    out = RunChanges()
    names = {n for _, m in msgs if m.kind == "metrics" for n in m.data["values"]}
    known = set(Series.objects.filter(run_id=run_id, name__in=names).values_list("name", flat=True))
    sids = storage.series_ids(run_id, names)
    out.new_series = names - known
    seen = RunEvent.objects.applied(run_id, [e for e, m in msgs if m.kind in ("state", "event", "rewind")])

    def event(entry_id, kind, name, step, t, payload):
        if entry_id in seen:  # replay after a crash between commit and XACK
            return
        out.events.append(run.record_event(entry_id, kind, name, step, t, payload).as_dict())

    for entry_id, msg in msgs:
        d = msg.data
        if msg.kind == "metrics":
            for name, x in d["values"].items():
                writer.add(sids[name], d["step"], x)
                out.add_point(name, d["step"], *classify(x))
            run.reached(d["step"])
        elif msg.kind == "heartbeat":
            run.apply_heartbeat(d)
        elif msg.kind == "state":
            run.apply_state(d["state"], d.get("detail", ""))
            event(entry_id, RunEvent.KIND_STATE, d["state"], d["step"], d["t"], {"detail": run.state_detail})
        elif msg.kind == "event":
            event(entry_id, RunEvent.KIND_EVENT, d["name"], d["step"], d["t"], d.get("payload") or {})
        elif msg.kind == "rewind":
            all_sids = set(Series.objects.filter(run_id=run_id).values_list("id", flat=True)) | set(sids.values())
            writer.rewind(all_sids, d["to_step"])
            out.rewind(d["from_step"], d["to_step"])
            run.rewound(d["to_step"])
            event(entry_id, RunEvent.KIND_REWIND, "rewind", d["to_step"], d["t"],
                  {"from_step": d["from_step"], "to_step": d["to_step"]})
        elif msg.kind == "run":
            run.apply_info(d, source)
        elif msg.kind == "manifest":
            run.apply_manifest(d["manifest"])
    run.updated_at = timezone.now()
    run.save()
    out.run = run.summary()
    return out
