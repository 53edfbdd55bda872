"""A W&B offline run as contract messages, written through apply_messages like anything ingest reads: an imported
run is stored, summarised and served exactly as a live one (same validation, same pyramid, same events)."""

from __future__ import annotations

import math
import re
import time
from collections import defaultdict
from dataclasses import dataclass, field

from django.db import transaction

from observatory import contract
from webapp.runs.models import Run, json_clean
from webapp.transfer import imports

SOURCE = "wandb"
_BAD_NAME_CHARS = re.compile(f"[^{contract.METRIC_NAME_CHARS}]")
_SUMMARY_KEYS = 1000  # summary entries kept (W&B's own "_runtime", "_step"... are bookkeeping, not kept)
_PER_RECORD = 1000  # metrics per message: 1000 names of <= 200 characters stay under contract.MAX_PAYLOAD_BYTES


def metric_name(key: str) -> str | None:
    """A W&B key -> a contract metric name ("eval loss" -> "eval_loss"), or None if nothing usable is left."""
    name = _BAD_NAME_CHARS.sub("_", key)[: contract.MAX_NAME_LEN]
    return name if contract.METRIC_NAME_RE.match(name) else None


@dataclass
class Import:
    """What an import will write (`messages`, in order) and what it tells the user."""

    run_id: str
    messages: list[contract.Message] = field(default_factory=list)
    renamed: dict[str, str] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    series: int = 0
    points: int = 0
    nonfinite: int = 0
    last_step: int | None = None
    summary: dict = field(default_factory=dict)


def plan(data: dict, run_id: str, name: str | None = None) -> Import:
    """read_run()'s output -> the messages a trainer would have sent (run, metrics per step, end state, an event)
    and the run's summary, which no message carries: write() stores it beside them."""
    out = Import(run_id)
    names: dict[str, str | None] = {}
    by_step: dict[int, dict[str, float]] = defaultdict(dict)
    skipped = list(data["skipped"])
    for row in data["history"]:
        step = row["_step"]
        if not isinstance(step, int) or not 0 <= step <= contract.MAX_STEP:
            skipped.append(f"history row with step {step!r}")
            continue
        for key, value in row.items():
            if key.startswith("_"):  # _step, _runtime, _timestamp: W&B bookkeeping, not metrics
                continue
            if key not in names:
                names[key] = metric_name(key)
                if names[key] is None:
                    skipped.append(f"values of {key!r}: no usable metric name")
                elif names[key] != key:
                    out.renamed[key] = names[key]
            if names[key] is not None:
                by_step[step][names[key]] = value  # a resumed run's repeated step: the later value wins
    summary = [(k, v) for k, v in data.get("summary", {}).items() if not k.startswith("_")]
    if len(summary) > _SUMMARY_KEYS:
        skipped.append(f"{len(summary) - _SUMMARY_KEYS} summary entries past the first {_SUMMARY_KEYS}")
    out.summary = json_clean(dict(summary[:_SUMMARY_KEYS]))
    out.skipped = list(dict.fromkeys(skipped))
    out.series = len({n for values in by_step.values() for n in values})
    out.points = sum(len(values) for values in by_step.values())
    out.nonfinite = sum(1 for values in by_step.values() for v in values.values() if not math.isfinite(v))
    out.last_step = max((s for s, values in by_step.items() if values), default=None)

    stamps = [row["_timestamp"] for row in data["history"] if isinstance(row.get("_timestamp"), float)]
    t = min(stamps, default=time.time())
    last = out.last_step or 0
    code = data.get("exit_code")
    end = ("stopped", "imported from W&B") if code == 0 else (
        "failed", f"imported from W&B; the run exited with code {code}" if code is not None else
        "imported from W&B; its log has no exit record (crashed, or copied while running)")
    send = [("run", {"t": t, "name": (name or data["name"] or run_id)[:200], "config": data["config"]})]
    for step in sorted(by_step):
        values = list(by_step[step].items())
        for i in range(0, len(values), _PER_RECORD):
            send.append(("metrics", {"t": t, "step": step, "values": dict(values[i:i + _PER_RECORD])}))
    send.append(("state", {"t": t, "state": end[0], "step": last, "detail": end[1]}))
    send.append(("event", {"t": t, "step": last, "name": "imported_from_wandb",
                           "payload": {"path": data["path"], "points": out.points, "skipped": out.skipped[:100]}}))
    out.messages = [contract.decode(contract.encode(run_id, kind, d), expect_run=run_id) for kind, d in send]
    return out


def write(imp: Import, owner=None) -> Run:
    """Replace any previous import of the run with this one, in one transaction; the run is claimed for `owner`
    (a user, or None: nobody's), so no other HTTP write token can append to it."""
    with transaction.atomic():
        Run.objects.filter(pk=imp.run_id, source=SOURCE).delete()
        imports.claim(imp.run_id, owner)
        imports.apply_chunked(imp.messages, SOURCE)
        Run.objects.filter(pk=imp.run_id).update(summary_values=imp.summary)
    return Run.objects.get(pk=imp.run_id)
