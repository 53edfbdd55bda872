"""Labelled logs and how detections are scored against them (bench/anomalies.py's library), and the detectors'
development (leave-one-log-out) and held-out figures on public logs (issue 48; docs/ANOMALIES.md)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from observatory.anomalies.model import OPENED, AnomalyLog
from observatory.anomalies.routing import Config
from observatory.anomalies.scan import open_text, read_rows, scan_rows

from heldout import verify

DATA = Path(__file__).resolve().parent / "data"
DEV = DATA / "anomalies" / "public"
SEEN = DATA / "heldout" / "anomalies"  # the first held-out clean curves: scored, seen, development data now
HELD = DATA / "heldout" / "anomalies2"
HELD_MENTION = "anomalies2"  # the held-out files must be frozen before the first commit of this file naming it
INC_MENTION = "heldout/incidents"  # held-out incident logs (frozen in f85dc18 before this file named them)
RISE = (1.15, 1.25, 1.35)
PREV = (1.15, 1.25, 1.5)
CONFIRM = ((1, None), (2, 1), (3, 1), (2, None))  # (sustain, sustain_gap): none; every-step logs (2 or 3); any
DEFAULT = (Config().loss.rise_ratio, Config().loss.prev_ratio, Config().loss.sustain, Config().loss.sustain_gap)
PRE, POST = 10, 120  # a detection matches a label if it opens within [start - PRE, end + POST]


def labelled(folder: Path, pattern: str = "*.csv*") -> list[tuple[str, Path, list[dict]]]:
    """(name, path, labels) of each curve file in `folder` that has a .labels.json beside it."""
    pairs = [(p, p.with_name(p.name.split(".csv")[0] + ".labels.json")) for p in sorted(folder.glob(pattern))]
    return [(p.name.split(".csv")[0], p, json.loads(lab.read_text())) for p, lab in pairs if lab.exists()]


def scan(path: Path, cfg: Config | None = None, mapping: dict | None = None) -> tuple[list, list]:
    """A recorded curve file read and fed to the detectors as the live path would: (rows, trace)."""
    with open_text(path) as f:
        rows = list(read_rows(f, mapping, cfg))
    trace = []
    scan_rows(rows, cfg, trace=trace)
    return rows, trace


def detections(trace) -> list[dict]:
    """One record per anomaly: its final state, plus the step and time at which it opened."""
    log, opened = AnomalyLog(), {}
    for step, t, e in trace:
        log.apply([e])
        if e.action == OPENED:
            opened[e.anomaly.key] = (e.at, t)
    return [{**a.to_dict(), "at": opened[a.key][0], "t": opened[a.key][1]} for a in log.anomalies()]


def match(dets: list[dict], labels: list[dict]) -> tuple[list, list]:
    """(per label: the matching detections of its kind; per detection: whether any label explains it)."""
    def fits(d, lab):
        return d["at"] >= lab["start_step"] - PRE and d["start_step"] <= lab["end_step"] + POST

    hits = [[d for d in dets if d["kind"] == lab["kind"] and fits(d, lab)] for lab in labels]
    explained = [any((d["kind"] == lab["kind"] or d["kind"] in lab.get("also", ())) and fits(d, lab)
                     for lab in labels) for d in dets]
    return hits, explained


def _config(rise: float, prev: float, sustain: int = 1, gap: int | None = None) -> Config:
    c = Config()
    return replace(c, loss=replace(c.loss, rise_ratio=rise, prev_ratio=prev, sustain=sustain, sustain_gap=gap))


def _scan(path: Path, cfg: Config) -> list[dict]:
    return detections([(step, t, e) for _, step, t, e in scan(path, cfg)[1]])


def _tally(results: dict, names: list[str]) -> dict:
    """found / incidents, precision over the incident logs' detections, warnings on the clean curves."""
    inc = found = dets = true = loud = 0
    for n in names:
        d, labels = results[n]
        if not labels:
            loud += sum(x["severity"] != "info" for x in d)
            continue
        hits, explained = match(d, labels)
        inc, found = inc + len(labels), found + sum(bool(h) for h in hits)
        dets, true = dets + len(d), true + sum(explained)
    return {"incidents": inc, "found": found, "precision": round(true / dets, 3) if dets else None,
            "clean_warning_or_critical": loud}


def _choose(per_opt: dict, names: list[str]) -> tuple:
    def key(opt):
        t = _tally(per_opt[opt], names)
        ok = (t["precision"] or 1.0) >= 0.9 and t["clean_warning_or_critical"] == 0
        near = abs(opt[0] - DEFAULT[0]) + abs(opt[1] - DEFAULT[1]) + (opt[2:] != DEFAULT[2:])  # ties: nearest code's
        return (not ok, -t["found"], t["clean_warning_or_critical"], near)
    return min(per_opt, key=key)


def development() -> dict:
    files = labelled(DEV) + [(f"seen:{n}", path, labels) for n, path, labels in labelled(SEEN)]
    per_opt = {(r, p, *c): {n: (_scan(path, _config(r, p, *c)), labels) for n, path, labels in files}
               for r in RISE for p in PREV for c in CONFIRM}
    names = [n for n, _, _ in files]
    logs = [n for n, _, labels in files if labels]
    folds, cv = {}, {}
    for left in logs:
        opt = _choose(per_opt, [n for n in names if n != left])
        folds[left] = {**_named(opt), **_tally(per_opt[opt], [left])}
        cv[left] = per_opt[opt][left]
    clean = [n for n in names if n not in logs]
    chosen = _choose(per_opt, names)
    total = _tally({**cv, **per_opt[chosen]}, logs + clean)   # the clean curves at the final choice
    return {"cross_validated": {**total, "recall": round(total["found"] / total["incidents"], 3)},
            "logs": folds, "in_sample_at_code_defaults": _tally(per_opt[DEFAULT], names),
            "clean_curves": clean, "chosen_on_all": _named(chosen), "code": _named(DEFAULT),
            "code_matches": chosen == DEFAULT, "grid": {"rise_ratio": RISE, "prev_ratio": PREV, "confirm": CONFIRM}}


def _named(opt: tuple) -> dict:
    return dict(zip(("rise_ratio", "prev_ratio", "sustain", "sustain_gap"), opt))


def held_out() -> dict:
    out, cfg = {}, Config()
    sets = [(n, p, lab, HELD_MENTION) for n, p, lab in labelled(HELD)] + [
        (f"incident:{n}", p, lab, INC_MENTION) for n, p, lab in labelled(DATA / INC_MENTION)]
    for name, path, labels, mention in sets:
        rel = str(path.relative_to(DATA.parent.parent))
        lab = str(path.with_name(path.name.split(".csv")[0] + ".labels.json").relative_to(DATA.parent.parent))
        checks = [verify(p, reporter="bench/anomaly_cv.py", mention=mention) for p in (rel, lab)]
        if bad := [c["reason"] for c in checks if not c["ok"]]:
            out[name] = {"file": rel, "refused": "; ".join(bad)}
            continue
        d = _scan(path, cfg)
        loud = [x for x in d if x["severity"] != "info"]
        with open_text(path) as f:
            points = sum(1 for _ in f) - 1
        row = {"file": rel, "frozen_by": checks[0]["frozen_by"], "labels": len(labels), "points": points,
               "warning_or_critical": len(loud), "info": len(d) - len(loud),
               "examples": [f"{x['kind']} {x['severity']} at {x['at']}: {x['explanation']}" for x in loud][:5]}
        if labels:
            hits, explained = match(d, labels)
            row.update(_tally({name: (d, labels)}, [name]), detections=len(d), true=sum(explained),
                       incidents_found=[f"{lb['kind']} {lb['start_step']}: " + (
                           f"found at {min(x['at'] for x in h)}" if h else "missed") for lb, h in zip(labels, hits)])
        out[name] = row
    scored = {n: r for n, r in out.items() if "refused" not in r}
    logs = [r for r in scored.values() if r["labels"]]
    incidents, dets = sum(r["incidents"] for r in logs), sum(r["detections"] for r in logs)
    return {"files": out, "incidents": incidents, "incident_logs": len(logs), "found": sum(r["found"] for r in logs),
            "recall": None if not incidents else round(sum(r["found"] for r in logs) / incidents, 3),
            "precision": None if not dets else round(sum(r["true"] for r in logs) / dets, 3),
            "incident_warning_or_critical": sum(r["warning_or_critical"] for r in logs),
            "clean_warning_or_critical": sum(r["warning_or_critical"] for r in scored.values() if not r["labels"]),
            "note": None if incidents else "no held-out incident log verified: recall and precision not measured",
            "curves": len(scored) - len(logs), "points": sum(r["points"] for r in scored.values()),
            "refused": sorted(n for n, r in out.items() if "refused" in r)}
