"""What several benches need beside bench/harness.py's stack: another commit's code to measure against this
checkout's in the same run (the landed-vs-new ratio), and a run's series loaded into the database.

- `landed_tree(ref, *paths)`: `git archive` of `ref` (those paths, or the whole tree) in a temporary directory;
- `run_landed(ref, script, *args, paths=...)`: a bench script run on the landed code of `ref` (its `--core DIR`), its
  one JSON object back (or {"ref", "error"});
- `load_series(run, name, points)`: a Series of `run` holding (step, value) points, written through the storage the
  ingest path uses (needs Django set up: harness.django_here);
- `Database(backend, pg_server)`: a throw-away SQLite file or PostgreSQL database, migrated, for server processes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parent.parent


def resolve(ref: str) -> str:
    """The commit id of `ref`; ValueError naming it when git knows no such ref."""
    out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", f"{ref}^{{commit}}"], capture_output=True,
                         text=True)
    if out.returncode:
        raise ValueError(f"no such git ref: {ref}")
    return out.stdout.strip()


@contextmanager
def landed_tree(ref: str, *paths: str):
    """A temporary directory holding `ref`'s tree (only `paths` of it, if given), removed after the block."""
    sha = resolve(ref)
    with tempfile.TemporaryDirectory(prefix="obs-landed-") as tmp:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", sha, *paths], capture_output=True,
                                 check=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        yield Path(tmp)


def run_landed(ref: str, script: Path, *args: str, paths: tuple[str, ...] = ("observatory",)) -> dict:
    """`script --core DIR *args --no-save` on `ref`'s `paths`: its JSON, with the ref and the commit it named."""
    try:
        with landed_tree(ref, *paths) as tree:
            out = subprocess.run([sys.executable, str(script), *args, "--no-save", "--core", str(tree)],
                                 capture_output=True, text=True, cwd=ROOT)
        sha = resolve(ref)
    except ValueError as e:
        return {"ref": ref, "error": str(e)}
    if out.returncode:
        return {"ref": ref, "error": out.stderr.strip().splitlines()[-1:]}
    return {"ref": ref, "commit": sha[:12], **json.loads(out.stdout)}


def load_series(run, name: str, points) -> object:
    """A new Series `name` of `run` holding `points` ((step, value) pairs), in one transaction."""
    from django.db import transaction

    from webapp.metrics import storage
    from webapp.metrics.models import Series

    series = Series.objects.create(run=run, name=name)
    with transaction.atomic():
        storage.bulk_load(series.id, points)
    series.refresh_from_db()
    return series


class Database:
    """A throw-away database of one backend, migrated, with a DATABASE_URL for the children."""

    def __init__(self, backend: str, pg_server: str):
        self.backend = backend
        if backend == "sqlite":
            self.dir = tempfile.mkdtemp(prefix="obs-bench-ingest-db-")
            self.url = f"sqlite:///{self.dir}/bench.sqlite3"
        else:
            import psycopg

            self.name = f"obs_bench_ingest_{os.getpid()}"
            self.admin = pg_server.rstrip("/") + "/postgres"
            with psycopg.connect(self.admin, autocommit=True) as c:
                c.execute(f"DROP DATABASE IF EXISTS {self.name}")
                c.execute(f"CREATE DATABASE {self.name}")
            self.url = pg_server.rstrip("/") + "/" + self.name
        # DEBUG off, as in production (Django's debug cursor would log every query's parameters)
        self.env = {**os.environ, "DATABASE_URL": self.url, "OBS_DEBUG": "0", "DJANGO_SECRET_KEY": "bench-only",
                    "PYTHONPATH": str(ROOT),
                    "DJANGO_SETTINGS_MODULE": "webapp.settings",
                    "OBS_LOG_LEVEL": os.environ.get("OBS_LOG_LEVEL", "WARNING")}
        subprocess.run([sys.executable, "manage.py", "migrate", "--noinput"], cwd=ROOT, env=self.env, check=True,
                       stdout=subprocess.DEVNULL)

    def sql(self, statements: list[str]) -> list:
        out = []
        if self.backend == "sqlite":
            import sqlite3

            with sqlite3.connect(urlparse(self.url).path) as c:
                for st in statements:
                    out.append(c.execute(st).fetchall())
        else:
            import psycopg

            with psycopg.connect(self.url, autocommit=True) as c:
                for st in statements:
                    cur = c.execute(st)
                    out.append(cur.fetchall() if cur.description else [])
        return out

    def reset(self) -> None:
        tables = [t for (t,) in self.sql(["SELECT name FROM sqlite_master WHERE type='table'" if self.backend ==
                                          "sqlite" else "SELECT tablename FROM pg_tables WHERE schemaname='public'"
                                          ])[0] if t.startswith(("metrics_", "runs_"))]
        if self.backend == "postgresql":
            self.sql([f"TRUNCATE {', '.join(tables)} CASCADE"])
        else:  # children first (foreign keys)
            order = ("metrics_point", "metrics_block", "metrics_", "runs_runevent", "runs_")
            self.sql([f"DELETE FROM {t}" for t in sorted(tables, key=lambda t: next(
                i for i, p in enumerate(order) if t.startswith(p)))])

    def count_points(self) -> int:
        return self.sql(["SELECT COUNT(*) FROM metrics_point"])[0][0][0]

    def close(self) -> None:
        if self.backend == "sqlite":
            shutil.rmtree(self.dir, ignore_errors=True)
        else:
            import psycopg

            with psycopg.connect(self.admin, autocommit=True) as c:
                c.execute(f"DROP DATABASE IF EXISTS {self.name} WITH (FORCE)")
