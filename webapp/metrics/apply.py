"""Applying validated contract messages to the database: runs, events, points, rewinds. One call per batch.

Everything here is idempotent when replayed (ingest may see an entry again after a crash before XACK, and a
publisher re-sends what a restarted Redis lost): points are upserts on (series, step), run fields are
overwritten, and an event is recorded once per stream entry id and once per (kind, name, step, time). Ingest and
the W&B importer both write through apply_messages, which first locks the runs' fence rows (webapp.metrics.fence):
one writer per run at a time, and none whose ingest lease has passed to another consumer.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable, Mapping

from django.utils import timezone

from observatory import contract
from observatory.downsample import FINITE, classify
from webapp.metrics import fence, storage
from webapp.metrics.changes import RunChanges
from webapp.metrics.models import Series
from webapp.runs.models import Run, RunEvent, from_unix

_EVENT_KINDS = ("state", "event", "rewind")


def apply_messages(items: Iterable[tuple[str, contract.Message]], source: str = "stream",
                   epochs: Mapping[str, int] | None = None) -> dict[str, RunChanges]:
    """(stream entry id, message) pairs in stream order -> what changed, per run. Call inside atomic().

    An empty entry id means "not from a stream" (an import): its events are recorded without a replay key.
    `source` is recorded on runs described by a `run` message ("stream": a live trainer, "wandb": imported).
    `epochs` ({run id: epoch}, from ingest's leases): raises fence.Fenced, before writing anything, when a run's
    current epoch is another one."""
    by_run: dict[str, list[tuple[str, contract.Message]]] = defaultdict(list)
    for entry_id, msg in items:
        by_run[msg.run].append((entry_id, msg))
    held = fence.lock(by_run)
    if epochs is not None:
        stale = {run_id for run_id in by_run if held.get(run_id) != epochs.get(run_id)}
        if stale:
            raise fence.Fenced(stale)
    writer = storage.SeriesWriter()
    changes = {run_id: _apply_run(run_id, msgs, writer, source) for run_id, msgs in by_run.items()}
    writer.flush()
    return changes


def _seen_events(run_id: str, msgs: list[tuple[str, contract.Message]]) -> tuple[set[str], set[tuple]]:
    """Entry ids already recorded as events, and (kind, name, step, t) of events already recorded at these times."""
    ev = [(e, m) for e, m in msgs if m.kind in _EVENT_KINDS]
    if not ev:
        return set(), set()
    times = {from_unix(m.data["t"]) for e, m in ev if e} - {None}
    same = set(RunEvent.objects.filter(run_id=run_id, t__in=times).values_list("kind", "name", "step", "t")) \
        if times else set()
    return RunEvent.objects.applied(run_id, [e for e, _ in ev]), same


def _apply_run(run_id: str, msgs: list[tuple[str, contract.Message]], writer: storage.SeriesWriter,
               source: str) -> RunChanges:
    run = Run.objects.for_ingest(run_id)
    out = RunChanges()
    names = {n for _, m in msgs if m.kind == "metrics" for n in m.data["values"]}
    sids, out.new_series = writer.resolve(run_id, names)
    seen_ids, seen = _seen_events(run_id, msgs)

    def event(entry_id, kind, name, step, t, payload):
        key = (kind, str(name)[:200], step, from_unix(t))
        if entry_id in seen_ids or (entry_id and key in seen):  # a replay, or a re-sent entry
            return
        seen.add(key)
        out.events.append(run.record_event(entry_id, kind, name, step, t, payload).as_dict())

    # the hot loop below fills these {step: (value, special)} dicts directly (rewinds prune the same dicts)
    stored = {name: writer.series(sid) for name, sid in sids.items()}
    changed = {name: out.points.setdefault(name, {}) for name in sids}
    for entry_id, msg in msgs:
        d = msg.data
        if msg.kind == "metrics":
            step = d["step"]
            for name, x in d["values"].items():
                vs = (float(x), FINITE) if x - x == 0 else classify(x)  # x - x is 0 only for finite numbers
                stored[name][step] = changed[name][step] = vs
            out.times[step] = d["t"]
            run.reached(step)
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
    out.points = {name: pts for name, pts in out.points.items() if pts}  # a rewind may have emptied some
    run.updated_at = timezone.now()
    run.save()
    out.run = run.summary()
    return out
