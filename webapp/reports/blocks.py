"""A report's body -> parts: Markdown runs (rendered and sanitised by the annotations' renderer) and blocks.

A block is a line of its own, outside fenced code: `{{chart run=R series=S steps=A..B}}` (steps optional; `A..`
follows the run live), `{{annotation id=N}}`, `{{anomaly id=N}}`, `{{forecast run=R}}`,
`{{compare runs=R1,R2 series=S steps=A..B}}`. Each is checked on write (a 400 that names the line); what it shows
(a thread summary, a forecast) is read when the page is served, so it stays current and hidden posts stay hidden.
"""

from __future__ import annotations

import re

from observatory import contract
from webapp.annotations import validation as ann_validation
from webapp.annotations.models import Annotation
from webapp.anomalies.models import Anomaly
from webapp.api import ApiError
from webapp.runs.models import Run

BLOCK = re.compile(r"^\s{0,3}\{\{\s*([a-z]+)((?:\s+[a-z]+=\S+)*)\s*\}\}\s*$")
FENCE = re.compile(r"^\s{0,3}(```|~~~)")
STEPS = re.compile(r"^(\d{1,19})?\.\.(\d{1,19})?$")
KEYS = {"chart": ({"run", "series"}, {"steps"}), "annotation": ({"id"}, set()), "anomaly": ({"id"}, set()),
        "forecast": ({"run"}, set()), "compare": ({"runs", "series"}, {"steps"})}
MAX_BLOCKS = 20
MAX_COMPARE = 4


def _fail(line: int, message: str):
    raise ApiError(400, f"line {line}: {message}", field="body", line=line)


def _run(line: int, run_id: str) -> str:
    if not contract.RUN_ID_RE.match(run_id) or not Run.objects.filter(pk=run_id).exists():
        _fail(line, f"no run {run_id[:64]!r}")
    return run_id


def _series(line: int, name: str) -> str:
    if not contract.METRIC_NAME_RE.match(name):
        _fail(line, f"{name[:60]!r} is not a series name")
    return name


def steps_of(raw: str | None) -> tuple[int | None, int | None]:
    """`A..B`, `A..` or `..B` -> (start, end), None for an open end; ApiError 400 otherwise."""
    if raw is None or raw == "":
        return None, None
    m = STEPS.match(raw)
    if not m:
        raise ApiError(400, "steps must be A..B, A.. or ..B (whole steps)", parameter="steps")
    start, end = (int(g) if g is not None else None for g in m.groups())
    if any(v is not None and v > contract.MAX_STEP for v in (start, end)):
        raise ApiError(400, "steps out of range", parameter="steps")
    if start is not None and end is not None and start > end:
        raise ApiError(400, "steps: the first step is after the last", parameter="steps")
    return start, end


def _steps(line: int, raw: str | None) -> tuple[int | None, int | None]:
    try:
        return steps_of(raw)
    except ApiError as e:
        _fail(line, e.message)


def _id(line: int, raw: str) -> int:
    if not raw.isdigit() or len(raw) > 12:
        _fail(line, "id must be a number")
    return int(raw)


def _block(line: int, kind: str, args: dict) -> dict:
    if kind not in KEYS:
        _fail(line, f"unknown block {{{{{kind[:20]}}}}}; blocks: {', '.join(KEYS)}")
    required, optional = KEYS[kind]
    if set(args) - required - optional or required - set(args):
        _fail(line, f"{{{{{kind}}}}} takes {', '.join(sorted(required))}"
                    + (f" and optionally {', '.join(sorted(optional))}" if optional else ""))
    if kind == "chart":
        start, end = _steps(line, args.get("steps"))
        return {"kind": kind, "run": _run(line, args["run"]), "series": _series(line, args["series"]),
                "start": start, "end": end}
    if kind == "compare":
        runs = list(dict.fromkeys(r for r in args["runs"].split(",") if r))
        if not 2 <= len(runs) <= MAX_COMPARE:
            _fail(line, f"compare takes 2 to {MAX_COMPARE} runs")
        start, end = _steps(line, args.get("steps"))
        return {"kind": kind, "runs": [_run(line, r) for r in runs], "series": _series(line, args["series"]),
                "start": start, "end": end}
    if kind == "forecast":
        return {"kind": kind, "run": _run(line, args["run"])}
    pk = _id(line, args["id"])
    model = Annotation if kind == "annotation" else Anomaly
    qs = Annotation.objects.public() if kind == "annotation" else Anomaly.objects.all()
    run_id = qs.filter(pk=pk).values_list("run_id", flat=True).first()
    if run_id is None:
        _fail(line, f"no {model._meta.verbose_name} {pk}")
    return {"kind": kind, "id": pk, "run": run_id}


def parse(body: str) -> list[dict]:
    """The parts of a (cleaned) body; ApiError 400 naming the line of a bad block."""
    parts: list[dict] = []
    text: list[str] = []
    fence = None

    def flush():
        src = "\n".join(text).strip("\n")
        if src.strip():
            parts.append({"kind": "markdown", "html": ann_validation.render(src)})
        text.clear()

    for n, raw in enumerate(body.split("\n"), start=1):
        f = FENCE.match(raw)
        if f and (fence is None or f.group(1) == fence):
            fence = f.group(1) if fence is None else None
        m = BLOCK.match(raw) if fence is None else None
        if m is None:
            text.append(raw)
            continue
        flush()
        args: dict = {}
        for pair in m.group(2).split():
            key, _, value = pair.partition("=")
            if key in args:
                _fail(n, f"{key} given twice")
            args[key] = value
        parts.append(_block(n, m.group(1), args))
    flush()
    if sum(p["kind"] != "markdown" for p in parts) > MAX_BLOCKS:
        raise ApiError(400, f"at most {MAX_BLOCKS} blocks in a report", field="body")
    return parts


def cited_runs(parts: list[dict]) -> set[str]:
    out: set[str] = set()
    for p in parts:
        if "run" in p:
            out.add(p["run"])
        out.update(p.get("runs", ()))
    return out
