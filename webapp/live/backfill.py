"""The reply to a `resume`: every stored point after the steps the client holds, plus missed events and rewinds,
read in a few queries for all the series at once (a browser resumes ~35 series; thousands reconnect together), and
the points of the live log's newest entries that storage may not hold yet (ingest appends a batch's points to the
log before its SQL write: a socket that joined the log after them must get them from the backfill)."""

from __future__ import annotations

from collections import defaultdict

from webapp.live import protocol
from webapp.metrics.models import Point, Series
from webapp.runs.models import Run, RunEvent


def run_summary(run_id: str) -> dict | None:
    run = Run.objects.filter(pk=run_id).first()
    return run.summary() if run else None


def backfill(run_id: str, after: dict[str, int], after_event: int | None) -> dict:
    """{"series", "rewinds", "events", "truncated"} for a resume (see webapp.live.protocol)."""
    events, rewinds = [], []
    if after_event is not None:
        for ev in RunEvent.objects.filter(run_id=run_id, id__gt=after_event).order_by("id")[:1000]:
            events.append(ev.as_dict())
            if ev.kind == RunEvent.KIND_REWIND:
                rewinds.append({"from_step": ev.payload.get("from_step"), "to_step": ev.payload.get("to_step")})
    # a rewind the client missed invalidates what it holds after to_step: re-send from there
    floor = min((rw["to_step"] for rw in rewinds if isinstance(rw.get("to_step"), int)), default=None)
    found_series = Series.objects.filter(run_id=run_id, name__in=list(after)).values_list("name", "id", "last_step")
    sids, last = {}, {}
    for name, sid, last_step in found_series:
        sids[name], last[sid] = sid, last_step
    groups: dict[int, list[int]] = defaultdict(list)  # after step -> series ids
    for name, sid in sids.items():
        groups[after[name] if floor is None else min(after[name], floor)].append(sid)
    rows: dict[int, list] = defaultdict(list)
    truncated_ids: set[int] = set()
    budget = protocol.MAX_BACKFILL_POINTS
    for start, ids in sorted(groups.items(), reverse=True):  # the most recent first: the cheapest to serve
        # A step window bounds each series to BACKFILL_LIMIT rows (steps are unique per series) in one query;
        # a series with points beyond it is truncated, and the client reloads it through the HTTP API.
        per = max(0, min(protocol.BACKFILL_LIMIT, budget // max(1, len(ids))))
        end = start + per
        found = Point.objects.filter(series_id__in=ids, step__gt=start, step__lte=end).order_by("series_id", "step")
        for sid, step, value, special in found.values_list("series_id", "step", "value", "special"):
            rows[sid].append((step, value, special))
        budget -= sum(len(rows[sid]) for sid in ids)
        truncated_ids.update(sid for sid in ids if last[sid] is not None and last[sid] > end)
    series = {name: protocol.series_json(rows[sid]) for name, sid in sids.items()}
    truncated = sorted(name for name, sid in sids.items() if sid in truncated_ids)
    return {"series": series, "rewinds": rewinds, "events": events, "truncated": truncated}


def with_unstored(body: dict, after: dict[str, int], tail: list[dict], after_event: int | None = None) -> dict:
    """The backfill `body` with the points of `tail` (the live log's newest update frames, oldest first) past the
    steps it holds: what ingest appended to the log but had not committed when the backfill was read. A rewind in
    the tail drops what follows its step, as the page does, and goes to the page with the body's rewinds, and the
    tail's events past `after_event` with the body's (a rewind's event, which the page marks, may not be stored
    yet): the points after it are the tail's own (every entry after it is in the tail), so a series takes them from
    the rewind's step, not from the step the page held. Series not asked for are left out."""
    series = {name: dict(s, steps=list(s["steps"]), values=list(s["values"]), nonfinite=list(s["nonfinite"]))
              for name, s in body["series"].items()}
    rewinds = list(body["rewinds"])
    cut = min((rw["to_step"] for rw in rewinds if isinstance(rw.get("to_step"), int)), default=None)
    for frame in tail:
        for rw in frame.get("rewinds") or ():
            to = rw.get("to_step")
            if not isinstance(to, int):
                continue
            cut = to if cut is None else min(cut, to)
            if rw not in rewinds:
                rewinds.append(rw)
            for s in series.values():
                keep = sum(1 for st in s["steps"] if st <= to)
                s["steps"], s["values"] = s["steps"][:keep], s["values"][:keep]
                s["nonfinite"] = [nf for nf in s["nonfinite"] if nf[0] <= to]
        for name, got in (frame.get("series") or {}).items():
            if name not in after:
                continue
            s = series.setdefault(name, {"steps": [], "values": [], "nonfinite": []})
            start = after[name] if cut is None else min(after[name], cut)  # (what the page keeps after rewinds)
            floor = max(start, s["steps"][-1] if s["steps"] else -1)
            for st, v in zip(got["steps"], got["values"]):
                if st > floor:
                    s["steps"].append(st)
                    s["values"].append(v)
                    floor = st
            s["nonfinite"] += [nf for nf in got.get("nonfinite") or () if nf[0] > start and nf not in s["nonfinite"]]
    events = list(body["events"])
    if after_event is not None:
        by_id = {ev["id"]: ev for ev in events}
        for frame in tail:
            by_id.update((ev["id"], ev) for ev in frame.get("events") or ()
                         if isinstance(ev.get("id"), int) and ev["id"] > after_event and ev["id"] not in by_id)
        events = [by_id[i] for i in sorted(by_id)]
    return {**body, "series": series, "rewinds": rewinds, "events": events}
