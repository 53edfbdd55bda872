"""Every bench still runs: its --help, and a smoke-sized run (seconds, not minutes) whose JSON is read back from
where the harness files it (bench/results/<topic>.json, here a temporary directory). The smoke runs are marked
`slow` (tests/conftest.py starts their files first) and `bench` (`-m "not bench"` leaves them out)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHES = ("annotations", "anomalies", "chaos", "dashboard", "fanout", "ingest", "liveview", "moe",
           "operate", "query", "scaling", "trainer")
# The tools that made a data set of bench/data, kept beside it: no measurement of their own, a --help each.
RECORDERS = ("data/anomalies/record_demo", "data/extract", "data/heldout/extract_heldout4",
             "data/heldout/extract_heldout6", "data/heldout/extract_heldout7")


@pytest.fixture
def short_tmp():
    """A temporary directory with a short path: the benches' TMPDIR (Chromium's singleton socket lives under it, and
    a Unix socket's path must stay under ~100 bytes, which pytest's per-test paths under xdist do not)."""
    path = Path(tempfile.mkdtemp(prefix="obs-b-", dir="/tmp" if os.path.isdir("/tmp") else None))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def run_bench(redis_url, tmp_path, short_tmp):
    """run_bench(name, *args, topic=name) -> (the newest filed result, seconds): the bench as a user runs it, on the
    test's own Redis database, its results filed under tmp_path; fails with the bench's output if it fails. The
    timeout only bounds a hang: a smoke run of the scaling fits took 166 s under the full suite on two cores."""

    def run(name: str, *args: str, topic: str | None = None, timeout: float = 900, filed: bool = True
            ) -> tuple[dict, float]:
        env = {**os.environ, "BENCH_REDIS_URL": redis_url, "REDIS_URL": redis_url, "PYTHONUNBUFFERED": "1",
               "BENCH_RESULTS_DIR": str(tmp_path / "results"), "OBS_DATA_DIR": str(tmp_path / "var"),
               "TMPDIR": str(short_tmp)}  # the benches' own SQLite files and work directories: this test's
        env.pop("DATABASE_URL", None)  # never the suite's database
        t0 = time.monotonic()
        # its own process group, killed whole on a timeout: killing the bench alone left the trainer it had started
        # training a whole token budget beside the rest of the suite (bench/first_step.py, 2026-12-07)
        proc = subprocess.Popen([sys.executable, f"bench/{name}.py", *args], cwd=ROOT, env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # anything of the bench's still running (none, normally)
            except ProcessLookupError:
                pass
        out = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
        took = time.monotonic() - t0
        assert out.returncode == 0, (f"bench/{name}.py {' '.join(args)}: exit {out.returncode}\n"
                                     f"stdout: {out.stdout[-3000:]}\nstderr: {out.stderr[-3000:]}")
        print(f"smoke bench/{name}.py: {took:.1f} s")
        if not filed:  # a tool that files no measurement (a data recorder): its JSON line on stdout
            return json.loads(out.stdout.strip().splitlines()[-1]), took
        run = json.loads((tmp_path / "results" / f"{topic or name}.json").read_text())["runs"][-1]
        assert run["commit"] and run["machine"]["cpus"] and run["date"], run
        return run["result"], took

    return run
