"""Refresh tests/file_durations.json (the order tests/conftest.py hands files to the xdist workers) from a full run:

    .venv/bin/python -m pytest -n 4 --dist loadfile --junitxml=/tmp/junit.xml
    .venv/bin/python tests/file_durations.py /tmp/junit.xml "load1 ~N during the run"

Each file's seconds are the sum of its tests' (setup, call and teardown): with --dist loadfile one worker runs a whole
file, so the longest files bound the wall time unless they start first."""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

OUT = Path(__file__).with_name("file_durations.json")


def per_file(junit_xml: str) -> Counter:
    took: Counter = Counter()
    for case in ET.parse(junit_xml).iter("testcase"):
        parts = case.get("classname", "").split(".")  # tests.web.live.test_hub[.TestClass]
        while parts and not parts[-1].startswith("test_"):
            parts.pop()
        if parts:
            took["/".join(parts) + ".py"] += float(case.get("time", 0))
    return took


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    took = per_file(argv[0])
    files = {f: round(s, 1) for f, s in sorted(took.items(), key=lambda kv: -kv[1])}
    OUT.write_text(json.dumps({"measured": argv[1], "files": files}, indent=0) + "\n")
    print(f"{len(files)} files, {sum(took.values()):.0f} s summed -> {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
