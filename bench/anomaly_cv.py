"""Development (cross-validated) and held-out figures for the detectors on public logs (issue 48).

Development: the public incident logs and clean curves of bench/data/anomalies/public — the very snippets the
coarse-log rules were written from. The loss detector's two coarse-log thresholds (`rise_ratio`, `prev_ratio`)
are chosen by leave-one-log-out cross-validation (a log's incidents leave together; 7 logs, 9 incidents): on the
other logs, the grid point that finds the most incidents with precision ≥ 0.9 and no warning on the clean curves
(ties: nearest the code's values), then scored on the log left out. `chosen_on_all` is the choice on every
development log; `code_matches` says whether the code's defaults are that choice. Held out: the files of
bench/data/heldout/anomalies, each verified against MANIFEST.json first (bench/heldout.py), scanned with the
code's defaults only.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from observatory.anomalies.routing import Config
from observatory.anomalies.scan import open_text, read_rows, scan_rows

from heldout import verify

DATA = Path(__file__).resolve().parent / "data"
DEV = DATA / "anomalies" / "public"
HELD = DATA / "heldout" / "anomalies"
RISE = (1.15, 1.25, 1.35)
PREV = (1.15, 1.25, 1.5)
DEFAULT = (Config().loss.rise_ratio, Config().loss.prev_ratio)


def _files(folder: Path) -> list[tuple[str, Path, list[dict]]]:
    out = []
    for path in sorted(folder.glob("*.csv*")):
        labels = path.with_name(path.name.split(".csv")[0] + ".labels.json")
        if labels.exists():
            out.append((path.name.split(".csv")[0], path, json.loads(labels.read_text())))
    return out


def _config(rise: float, prev: float) -> Config:
    c = Config()
    return replace(c, loss=replace(c.loss, rise_ratio=rise, prev_ratio=prev))


def _scan(path: Path, cfg: Config, detections) -> list[dict]:
    with open_text(path) as f:
        rows = list(read_rows(f, None, cfg))
    trace = []
    scan_rows(rows, cfg, trace=trace)
    return detections([(step, t, e) for _, step, t, e in trace])


def _tally(results: dict, names: list[str], match) -> dict:
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


def _choose(per_opt: dict, names: list[str], match) -> tuple:
    def key(opt):
        t = _tally(per_opt[opt], names, match)
        ok = (t["precision"] or 1.0) >= 0.9 and t["clean_warning_or_critical"] == 0
        return (not ok, -t["found"], abs(opt[0] - DEFAULT[0]) + abs(opt[1] - DEFAULT[1]))
    return min(per_opt, key=key)


def development(detections, match) -> dict:
    files = _files(DEV)
    per_opt = {(r, p): {n: (_scan(path, _config(r, p), detections), labels) for n, path, labels in files}
               for r in RISE for p in PREV}
    names = [n for n, _, _ in files]
    logs = [n for n, _, labels in files if labels]
    folds, cv = {}, {}
    for left in logs:
        opt = _choose(per_opt, [n for n in names if n != left], match)
        folds[left] = {"rise_ratio": opt[0], "prev_ratio": opt[1], **_tally(per_opt[opt], [left], match)}
        cv[left] = per_opt[opt][left]
    clean = [n for n in names if n not in logs]
    chosen = _choose(per_opt, names, match)
    total = _tally({**cv, **per_opt[chosen]}, logs + clean, match)   # the clean curves at the final choice
    return {"cross_validated": {**total, "recall": round(total["found"] / total["incidents"], 3)},
            "logs": folds, "in_sample_at_code_defaults": _tally(per_opt[DEFAULT], names, match),
            "chosen_on_all": {"rise_ratio": chosen[0], "prev_ratio": chosen[1]},
            "code": {"rise_ratio": DEFAULT[0], "prev_ratio": DEFAULT[1]}, "code_matches": chosen == DEFAULT,
            "grid": {"rise_ratio": RISE, "prev_ratio": PREV}}


def held_out(detections, match) -> dict:
    out, cfg = {}, Config()
    for name, path, labels in _files(HELD):
        rel = str(path.relative_to(DATA.parent.parent))
        lab = str(path.with_name(name + ".labels.json").relative_to(DATA.parent.parent))
        checks = [verify(p, reporter="bench/anomaly_cv.py") for p in (rel, lab)]
        bad = [c["reason"] for c in checks if not c["ok"]]
        if bad:
            out[name] = {"file": rel, "refused": "; ".join(bad)}
            continue
        d = _scan(path, cfg, detections)
        loud = [x for x in d if x["severity"] != "info"]
        row = {"file": rel, "frozen_by": checks[0]["frozen_by"], "labels": len(labels),
               "warning_or_critical": len(loud), "info": len(d) - len(loud),
               "examples": [f"{x['kind']} {x['severity']} at {x['at']}: {x['explanation']}" for x in loud][:5]}
        if labels:
            row.update(_tally({name: (d, labels)}, [name], match))
        out[name] = row
    scored = {n: r for n, r in out.items() if "refused" not in r}
    incidents = sum(r.get("incidents", 0) for r in scored.values())
    return {"files": out, "incidents": incidents,
            "recall": None if not incidents else round(sum(r.get("found", 0) for r in scored.values()) / incidents, 3),
            "clean_warning_or_critical": sum(r["warning_or_critical"] for r in scored.values() if not r["labels"]),
            "note": None if incidents else "no held-out incident logs (bench/data/heldout/README.md): held-out "
                                           "recall and precision are not measured, only warnings on clean curves",
            "refused": sorted(n for n, r in out.items() if "refused" in r)}
