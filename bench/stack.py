"""What several benches need beside bench/harness.py's stack: another commit's code to measure against this
checkout's in the same run (the landed-vs-new ratio), and a run's series loaded into the database.

- `tree(spec)` (`--compare`): a directory as it is, or a commit checked out into a temporary git worktree;
- `run_landed(ref, script, *args, paths=...)`: a bench script run on the landed code of `ref` (`git archive` of those
  paths in a temporary directory, its `--core DIR`), its one JSON object back (or {"ref", "error"});
- `load_series(run, name, points)`: a Series of `run` holding (step, value) points, written through the storage the
  ingest path uses (needs Django set up: harness.django_here).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def resolve(ref: str) -> str:
    """The commit id of `ref`; ValueError naming it when git knows no such ref."""
    out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", f"{ref}^{{commit}}"], capture_output=True,
                         text=True)
    if out.returncode:
        raise ValueError(f"no such git ref: {ref}")
    return out.stdout.strip()


@contextmanager
def tree(spec: str):
    """The tree at `spec`: a directory, or a commit (hash, branch, tag) of this repository checked out for now."""
    if Path(spec).is_dir():
        yield Path(spec).resolve()
        return
    where = Path(tempfile.mkdtemp(prefix="obs-bench-tree-")) / "tree"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet", str(where), spec], check=True)
    try:
        yield where
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(where)], check=False)


def run_landed(ref: str, script: Path, *args: str, paths: tuple[str, ...] = ("observatory",)) -> dict:
    """`script --core DIR *args --no-save` on `ref`'s `paths`: its JSON, with the ref and the commit it named."""
    try:
        sha = resolve(ref)
    except ValueError as e:
        return {"ref": ref, "error": str(e)}
    with tempfile.TemporaryDirectory(prefix="obs-landed-") as tmp:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", sha, *paths], capture_output=True,
                                 check=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        out = subprocess.run([sys.executable, str(script), *args, "--no-save", "--core", tmp], capture_output=True,
                             text=True, cwd=ROOT)
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
