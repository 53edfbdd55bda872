"""Render docs/PERFORMANCE.md from bench/results/: one section per topic with its target, the newest run's figures
(machine, load, commit, date), the landed-vs-new ratios where the run measured both, and the topic's narrative.

    .venv/bin/python bench/report.py            # writes docs/PERFORMANCE.md
    .venv/bin/python bench/report.py --check    # exit 1 if docs/PERFORMANCE.md is not what the results render

bench/results/<topic>.json is what bench/harness.py's report() files ({"topic", "runs": [...]}, newest last);
bench/results/<topic>.md is the topic's narrative: how it was measured, and the history of earlier figures.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
OUT = ROOT / "docs" / "PERFORMANCE.md"
MAX_ROWS = 60

# What each topic is held to (the issues' targets); a topic without one shows its figures only.
TARGETS = {
    "latency": "publish → browser p50 ≤ 50 ms, p99 ≤ 250 ms (1,000 other viewers watching)",
    "latency_nchan": "publish → browser p50 ≤ 50 ms, p99 ≤ 250 ms through the push tier",
    "push_tier": "10,000 viewers with p99 ≤ 1 s; 5,000 at once current within 15 s; a 30-minute soak with flat RSS; "
                 "push-tier CPU per delivered (viewer, step) ≤ 0.25× the hub's",
    "fanout": "one replica holds ~3,000 viewers within a 1 s p99 (two shared cores)",
    "ogimage": "a cached link preview answered in ≤ 100 ms",
    "annotations": "a live annotation drawn on open dashboards within 1 s",
    "query": "full range of a 10M-point series at points=1000 in tens of ms",
    "trim": "ingest far behind a capped stream loses nothing it has not been told about",
    "live_log": "10,000 viewers through nchan at p99 <= 600 ms, <= 1.0 message per viewer per step, total server CPU "
                "per delivered (viewer, step) <= 10 us; full-width latency p50/p99 <= 25/150 ms with 1,000 others",
    "chaos": "no point lost, doubled or missing from the live client through Redis, ingest and web crashes",
    "dashboard": "1M-step run: first paint <= 200 ms, browser CPU <= 250 ms (<= 600 ms at 4x CPU throttling); zoom "
                 "refetch -> redraw <= 30 ms for every chart; <= 250 KB of JavaScript before first paint",
    "liveview": "main-thread p99 <= 2 ms an update with the default charts, <= 4 ms with 20; 0 long tasks a minute",
}
TITLES = {"push_tier": "Push tier (nchan) against the hub", "latency": "Publish → browser latency (hub)",
          "latency_nchan": "Publish → browser latency (push tier)", "fanout": "Fan-out (hub)",
          "dashboard": "Dashboard (first paint, zoom, live view)", "query": "Series queries (storage)",
          "ingest": "Ingest throughput and durability"}


def flatten(value, prefix: str = "") -> list[tuple[str, object]]:
    """(dotted key, scalar) pairs of a result, lists of scalars shown whole."""
    if isinstance(value, dict):
        return [kv for k, v in value.items() for kv in flatten(v, f"{prefix}.{k}" if prefix else str(k))]
    if isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        return [kv for i, v in enumerate(value) for kv in flatten(v, f"{prefix}[{i}]")]
    return [(prefix, value)]


def ratios(result: dict) -> list[tuple[str, object]]:
    """The comparisons a run measured in the same run: ratios (`ratio`, `_over_`, `_vs_` in a key's last part, not a
    property of the data such as `compute_ratio`) and `vs_landed` tables; never a landed tree's whole result."""
    out = []
    for k, v in flatten(result):
        parts = k.split(".")
        last = parts[-1]
        if parts[0] in ("landed", "ladders_landed") or last == "compute_ratio":
            continue
        if parts[0] == "vs_landed" or any(m in last for m in ("ratio", "_over_", "_vs_")):
            out.append((k, v))
    return out


def cell(v) -> str:
    text = json.dumps(v) if isinstance(v, (list, dict)) else str(v)
    return (text if len(text) <= 100 else text[:97] + "...").replace("|", "\\|")


def section(topic: str) -> list[str]:
    lines = [f"## {TITLES.get(topic, topic.replace('_', ' ').capitalize())} (`{topic}`)", ""]
    if topic in TARGETS:
        lines += [f"**Target:** {TARGETS[topic]}.", ""]
    path = RESULTS / f"{topic}.json"
    runs = json.loads(path.read_text())["runs"] if path.exists() else []
    runs = [r for r in runs if "quick" not in r["result"]]  # smoke-sized runs check code paths, measure nothing
    if runs:
        run = runs[-1]
        m = run["machine"]
        lines += [f"Newest run: {run['date']}, commit `{run['commit']}`, {m.get('cpus')} CPUs ({m.get('cpu', '')}), "
                  f"load1 {m.get('load1')} at its end; `bench/{topic}` {' '.join(run.get('argv', []))} "
                  f"({len(runs)} run(s) filed).", ""]
        rows = flatten(run["result"])
        lines += ["| figure | value |", "|---|---|"]
        lines += [f"| {k} | {cell(v)} |" for k, v in rows[:MAX_ROWS]]
        if len(rows) > MAX_ROWS:
            lines.append(f"| ... | {len(rows) - MAX_ROWS} more in bench/results/{topic}.json |")
        comp = ratios(run["result"])
        if comp:
            lines += ["", "Compared in the same run (landed vs new, or the run's own alternatives):", "",
                      "| comparison | value |", "|---|---|", *[f"| {k} | {cell(v)} |" for k, v in comp[:MAX_ROWS]]]
        lines.append("")
    else:
        lines += [f"No run filed in bench/results/{topic}.json yet: the figures are the narrative's below.", ""]
    story = RESULTS / f"{topic}.md"
    if story.exists():
        lines += [story.read_text().rstrip(), ""]
    return lines


def render() -> str:
    topics = sorted({p.stem for p in RESULTS.glob("*.json")} | {p.stem for p in RESULTS.glob("*.md")})
    head = ["# Performance", "",
            "Generated by `python bench/report.py` from `bench/results/` (do not edit by hand: change a topic's",
            "narrative in `bench/results/<topic>.md`, or run its bench, which files a new run). Each bench files its",
            "JSON with the machine, its load, the commit and the date; figures measured on a shared 2-core box say",
            "so in their load.", ""] + textwrap.wrap("Topics: " + ", ".join(f"`{t}`" for t in topics) + ".", 116) + [""]
    return "\n".join(head + [line for t in topics for line in section(t)]).rstrip() + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if docs/PERFORMANCE.md is out of date")
    args = ap.parse_args()
    text = render()
    if args.check:
        return 0 if OUT.exists() and OUT.read_text() == text else 1
    OUT.write_text(text)
    print(f"wrote {OUT.relative_to(ROOT)} ({len(text.splitlines())} lines)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
