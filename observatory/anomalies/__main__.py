"""Command line: `python -m observatory.anomalies scan FILE.csv [--map COLUMN=METRIC ...]`."""

from __future__ import annotations

import argparse
import json
import sys

from observatory.anomalies.scan import ScanError, as_record, parse_maps, scan_file


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m observatory.anomalies",
                                 description="Find training anomalies in logged metrics.")
    sub = ap.add_subparsers(dest="command", required=True)
    sc = sub.add_parser("scan", help="scan a CSV of metrics; prints one JSON object per anomaly")
    sc.add_argument("file", help="CSV with a step column and metric columns (.gz: gzip-compressed)")
    sc.add_argument("--map", action="append", default=[], metavar="COLUMN=METRIC",
                    help="read COLUMN as METRIC (a contract name, or step/run/time); repeatable")
    args = ap.parse_args(argv)
    try:
        found = scan_file(args.file, parse_maps(args.map))
    except ScanError as e:
        print(f"scan: {args.file}: {e}", file=sys.stderr)
        return 2
    for run, a in found:
        print(json.dumps(as_record(run, a)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
