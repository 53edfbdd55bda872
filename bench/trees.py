"""Another tree for a bench to run beside this one (`--compare`): a directory as it is, or a commit checked out
into a temporary git worktree for the bench's duration (removed after)."""

from __future__ import annotations

import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path

from harness import ROOT


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


# JavaScript the page fetched and ran before its first paint ("obs-first-paint"): bytes of the scripts run
# (<script> elements) and of every .js fetched (a preloaded bundle included), decoded sizes, from Resource Timing.
JS_BEFORE_PAINT = """() => {
  const fp = performance.getEntriesByName('obs-first-paint')[0].startTime;
  const js = performance.getEntriesByType('resource').filter((r) => new URL(r.name).pathname.endsWith('.js') &&
                                                               r.responseEnd <= fp);
  const sum = (l) => l.reduce((a, r) => a + (r.decodedBodySize || r.transferSize || 0), 0);
  return {run: sum(js.filter((r) => r.initiatorType === 'script')), fetched: sum(js),
          files: js.filter((r) => r.initiatorType === 'script').map((r) => new URL(r.name).pathname.split('/').pop())};
}"""
