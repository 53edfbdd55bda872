"""The operator panel's cost: one snapshot (what /ws/operate/ pushes) and one audit-trail sync, for many runs."""

from __future__ import annotations

import json
import os
import tempfile
import sys

from harness import django_here, med, parser, report, timed_ms  # bench/, this script's directory, is first on sys.path

os.environ.setdefault("OBS_CONTROL_KEY", "bench-operate-key-0123456789")
django_here(os.path.join(tempfile.gettempdir(), "obs-bench-operate.sqlite3"))  # DATABASE_URL, else this file

from django.db import connection  # noqa: E402

from webapp.control import channel, snapshot  # noqa: E402

from bench.data.operate.seed import cleanup, setup  # noqa: E402


def timed(fn, repeat: int) -> dict:
    out = timed_ms(fn, repeat)
    return {"median_ms": med(out, 2), "max_ms": round(max(out), 2)}


def main() -> int:
    ap = parser(__doc__, "operate")
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--commands", type=int, default=200)
    ap.add_argument("--points", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=15)
    a = ap.parse_args()
    ids = setup(a.runs, a.commands, a.points)
    try:
        body = snapshot.build()
        result = {"runs": a.runs, "commands": a.commands, "points_per_series": a.points,
                  "database": connection.vendor,
                  "snapshot_bytes": len(json.dumps({"type": "snapshot", **body})),
                  "sync": timed(lambda: channel.sync(ids), a.repeat),
                  "snapshot_build": timed(snapshot.build, a.repeat)}
    finally:
        cleanup(ids)
    return report("operate", result, a.json, not a.no_save)


if __name__ == "__main__":
    sys.exit(main())
