"""What the run pages hand to the browser besides the JSON API: chart specs, the hardware peak, time anchors."""

from __future__ import annotations

import json
import math

from django.core.serializers.json import DjangoJSONEncoder
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

from observatory import contract
from webapp.runs import extensions
from webapp.runs.models import ENDED_STATES, IMPORTED_SOURCES, Run, RunEvent



class RawJSON(str):
    """A page-data value that is JSON text already (firstpaint.py: windows cached as the text the page carries),
    put into the page data as it is: not decoded and encoded again a page view."""


def script(page: dict, element_id: str = "page-data") -> SafeString:
    """Django's json_script of `page`, its RawJSON values spliced in as they are (after the others)."""
    raw = {k: v for k, v in page.items() if isinstance(v, RawJSON)}
    text = json.dumps({k: v for k, v in page.items() if k not in raw}, cls=DjangoJSONEncoder)
    if raw:
        text = text[:-1] + (", " if len(text) > 2 else "") + ", ".join(
            f"{json.dumps(k)}: {v}" for k, v in raw.items()) + "}"
    text = text.replace("&", "\\u0026").replace("<", "\\u003C").replace(">", "\\u003E")  # (json_script's escapes)
    return format_html('<script id="{}" type="application/json">{}</script>', element_id, mark_safe(text))


# The dashboard's default line charts (a chart's id is its first metric; the page's URL names charts by id).
# `metrics` are always drawn; `optional` ones join as extra traces once the run has them; `extra_prefix`: every
# series named <prefix><one segment> joins too (per-domain losses); `secondary`: drawn against a right-hand axis.
DASHBOARD_CHARTS = (
    {"title": "Training loss", "metrics": [contract.M_LOSS], "optional": [contract.M_CE],
     "extra_prefix": contract.domain_loss(""), "topic": "loss"},
    {"title": "Learning rate", "metrics": [contract.M_LR], "topic": "learning_rate"},
    {"title": "Gradient norm", "metrics": [contract.M_GRAD_NORM], "topic": "grad_norm"},
    {"title": "Throughput · MFU", "metrics": [contract.M_TOKENS_PER_S], "optional": [contract.M_MFU],
     "secondary": [contract.M_MFU], "topic": "throughput"},
    {"title": "Token drop", "metrics": [contract.M_DROP], "topic": "token_drop"},
)
# A run with a pre-registered forecast shows its held-out loss too: the forecast band is drawn there (forecast.js)
HELD_OUT_CHART = {"title": "Held-out loss", "metrics": [contract.M_EVAL_LOSS],
                  "extra_prefix": contract.eval_domain_loss(""), "topic": "loss"}
MAX_ANCHORS = 1000  # (step, time) pairs for the wall-time axis; more are thinned evenly
# A peak FLOP/s that is a guess (an assumed CPU rate, an unknown device) makes MFU meaningless. A measured one (the
# trainer's best-of matmul on CPU, training.telemetry.peak_flops) is this machine's own figure, as bench/moe.py uses.
_GUESSED = ("cpu", "guess", "assum", "unknown")
_MEASURED = "measured"


def peak_info(run: Run) -> dict:
    """The hardware peak behind MFU: from the latest `compiled` event, else the config. `known` only for a
    measured or data-sheet peak; imported runs keep whatever MFU their logger computed (flagged if above 1)."""
    ev = run.events.filter(kind=RunEvent.KIND_EVENT, name="compiled").order_by("-id").first()
    payload = ev.payload if ev else {}
    flops = _num(payload.get("peak_flops"))
    source = str(payload.get("peak_flops_source") or "")
    if not flops:
        train = run.config.get("train") if isinstance(run.config.get("train"), dict) else {}
        flops = _num(train.get("peak_flops"))
        source = "config" if flops else source
    guessed = any(g in source.lower() for g in _GUESSED) and _MEASURED not in source.lower()
    known = bool(flops) and not guessed
    if run.source in IMPORTED_SOURCES:
        known, source = True, source or "computed by the original logger"
    fpt = _num(payload.get("flops_per_token"))
    return {"known": known, "flops": flops, "source": source, "flops_per_token": fpt}


def bounds(peak: dict) -> dict:
    """Values no real step can reach, per metric: drawn as flagged marks, never as part of the line. Only against
    a data-sheet (or configured) peak: a peak the trainer measured itself (a best-of matmul on a CPU that other
    processes share) can sit below what the run then reaches, so real steps above it are not impossible."""
    if _MEASURED in peak["source"].lower():
        return {}
    out = {contract.M_MFU: {"max": 1.0, "why": "above 100% of the hardware's peak: a timing artefact"}}
    if peak["known"] and peak["flops"] and peak["flops_per_token"]:
        out[contract.M_TOKENS_PER_S] = {"max": peak["flops"] / peak["flops_per_token"],
                                        "why": "faster than the hardware's peak allows: a timing artefact"}
    return out


def _has(spec: dict, names: set[str]) -> bool:
    p = spec.get("extra_prefix")
    return any(m in names for m in spec["metrics"] + spec.get("optional", [])) or bool(
        p and any(n.startswith(p) and "/" not in n[len(p):] for n in names))


def charts(peak: dict, names: set[str] | None = None, forecast: bool = False) -> list[dict]:
    """The default charts. `names`: the run's series; once it has any, a chart none of whose series it has is left
    out (a client run logging its loss gets no empty Throughput or Token drop chart; the picker still offers every
    series). Before its first point (a trainer compiling) every default chart is there, saying why it is empty.
    `forecast`: the held-out loss chart joins after the training loss, whether or not it has points yet."""
    specs = [dict(c) for c in DASHBOARD_CHARTS]
    if forecast:
        specs.insert(1, dict(HELD_OUT_CHART))
    if names:
        specs = [c for c in specs if _has(c, names) or (forecast and c["metrics"] == HELD_OUT_CHART["metrics"])]
    if not peak["known"]:  # MFU against a guessed peak is not a number anyone should read
        for c in specs:
            if contract.M_MFU in c.get("optional", []):
                c["optional"] = [m for m in c["optional"] if m != contract.M_MFU]
                c["title"] = "Throughput"
                c["note"] = "MFU hidden: this run's hardware peak is unknown" + (
                    f" ({peak['source']})" if peak["source"] else "")
    return specs


def time_anchors(run: Run) -> list[list[float]]:
    """[[step, unix seconds], ...] ascending in both, for drawing a wall-time axis: the run's events in arrival
    order (a rewind forgets what came after its step: those steps were trained again later), then the latest
    heartbeat. Steps between anchors are interpolated by the page."""
    anchors: list[tuple[int, float]] = []
    rows = (run.events.filter(t__isnull=False, step__isnull=False).order_by("id")
            .values_list("kind", "name", "step", "t"))
    for kind, name, step, t in rows.iterator():
        if kind == RunEvent.KIND_STATE and name == "starting" and anchors:
            continue  # a restart says "starting" at step 0 before it restores: not where the run is
        if kind == RunEvent.KIND_REWIND:
            anchors = [a for a in anchors if a[0] <= step]
        anchors.append((step, t.timestamp()))
    if run.last_heartbeat_at and isinstance(run.heartbeat.get("step"), int):
        anchors.append((run.heartbeat["step"], run.last_heartbeat_at.timestamp()))
    clean: list[tuple[int, float]] = []
    for step, t in sorted(anchors):
        if clean and step == clean[-1][0]:
            clean[-1] = (step, max(t, clean[-1][1]))  # the latest time a step was reached
        elif not clean or t > clean[-1][1]:
            clean.append((step, t))
    if len(clean) > MAX_ANCHORS:
        every = math.ceil(len(clean) / MAX_ANCHORS)
        clean = clean[::every] + ([clean[-1]] if (len(clean) - 1) % every else [])
    return [[s, round(t, 3)] for s, t in clean]


def rewinds(run: Run) -> list[dict]:
    """Every restart and every rewind that superseded steps, for the charts' markers (the page's event list holds
    only the latest events): {from_step, to_step, label, t}; a restart's reads "resumed at N", a rollback's
    "↺ back to N"; `t` (ISO, when it happened) tells marks made on the abandoned branch from the new timeline's."""
    out, restarting = [], False
    rows = (run.events.filter(kind__in=[RunEvent.KIND_REWIND, RunEvent.KIND_STATE])
            .order_by("id").values_list("kind", "name", "payload", "t"))
    for kind, name, payload, t in rows.iterator():
        if kind == RunEvent.KIND_STATE:
            restarting = name == "starting" or (restarting and name not in ("training", "stopped", "failed"))
            continue
        a, b = payload.get("from_step"), payload.get("to_step")
        if isinstance(a, int) and isinstance(b, int) and (a > b or (restarting and a == b)):  # a restart: marked
            out.append({"from_step": a, "to_step": b, "label": f"resumed at {b}" if restarting else f"↺ back to {b}",
                        "t": t.isoformat() if t else None})
    return out


def preview_meta(request, run: Run) -> list[tuple[str, str]]:
    """The (property, content) pairs of the first preview-meta contributor (runs.extensions) that answers."""
    for fn in extensions.PREVIEW_META:
        meta = fn(request, run)
        if meta:
            return list(meta.items())
    return []


def first_started(run: Run):
    """When the run first started: a restart sends a new `run` message, which must not move "Started"."""
    first = run.events.filter(t__isnull=False).order_by("id").values_list("t", flat=True).first()
    times = [t for t in (run.started_at, first) if t is not None]
    return min(times) if times else None


def progress(run: Run) -> dict:
    """Tokens of budget, rate and ETA from the latest heartbeat (absent fields stay None)."""
    hb = run.heartbeat or {}
    tokens, budget = _num(hb.get("tokens")), _num(hb.get("token_budget"))
    ended = run.state in ENDED_STATES
    fraction = min(1.0, tokens / budget) if tokens is not None and budget else None
    return {"tokens": tokens, "token_budget": budget, "fraction": fraction, "percent": percent(fraction),
            "eta_s": None if ended else _num(hb.get("eta_s")),
            "steps_per_s": None if ended else _num(hb.get("steps_per_s"))}


def duration(s) -> str:
    """A span as every page writes one (static/js/plotkit.js Obs.duration): "3 d 4 h", "2 h 5 min", "7 s"."""
    if _num(s) is None:
        return "–"
    s = max(0, round(s))
    d, h, m = s // 86400, s // 3600 % 24, s // 60 % 60
    return f"{d} d {h} h" if d else f"{h} h {m} min" if h else f"{m} min {s % 60} s" if m else f"{s} s"


def time_left(run: Run, prog: dict) -> str:
    """The run list's "time left" (static/js/plotkit.js Obs.timeLeft, the run header's: the same rule): the latest
    heartbeat's estimate while it trains and its trainer is heard from (a lost or ended trainer's estimate is
    stale: none); once ended, how it ended ("finished" only when it trained its whole token budget)."""
    fraction = prog["fraction"]
    if run.state == "failed":
        return "failed"
    if run.state == "stopped":
        return "finished" if fraction is not None and fraction >= 0.999 else "stopped"
    if run.health in ("lost", "ended") or run.state != "training" or prog["eta_s"] is None:
        return "–"
    return "≈ " + duration(prog["eta_s"])


def percent(fraction: float | None) -> str | None:
    """A run's progress as every page writes it (static/js/plotkit.js Obs.percent: the same rule, the same float
    steps): one decimal below 10% ("0.3%"), whole percents from there, rounded down (no "100%" before the end)."""
    if fraction is None:
        return None
    tenths = math.floor(fraction * 1000 + 1e-9)
    return (f"{tenths / 10:.1f}".removesuffix(".0") if tenths < 100 else str(tenths // 10)) + "%"


def _num(v):
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


MAX_FACTS = 300  # rows per table of the run page's config/summary section; the API has every one
MAX_FACT_CHARS = 200


def _facts(obj, prefix: str = "") -> list[tuple[str, str]]:
    """A nested JSON object as (dotted key, value text) rows: {"optimizer": {"name": "adamw"}} -> optimizer.name."""
    rows: list[tuple[str, str]] = []
    for key, value in (obj or {}).items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            rows.extend(_facts(value, name + "."))
            continue
        text = value if isinstance(value, str) else json.dumps(value, allow_nan=True)
        rows.append((name, text if len(text) <= MAX_FACT_CHARS else text[:MAX_FACT_CHARS - 1] + "…"))
    return rows


def facts(detail: dict) -> dict:
    """The run page's "Config and summary" tables, from the (already redacted) detail the page is given."""
    out = {}
    for part in ("summary", "config"):
        rows = _facts(detail.get(part))
        out[part] = {"rows": rows[:MAX_FACTS], "more": max(0, len(rows) - MAX_FACTS)}
    out["any"] = bool(out["summary"]["rows"] or out["config"]["rows"])
    return out
