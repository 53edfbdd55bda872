"""Held-out files and their freeze (bench/data/heldout/README.md): which files may be reported as held out."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = "bench/data/heldout/MANIFEST.json"


def _git(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True)


def _entry_at(root: Path, commit: str, manifest: str, path: str) -> dict | None:
    r = _git(root, "show", f"{commit}:{manifest}")
    if r.returncode != 0:
        return None
    try:
        return json.loads(r.stdout).get("files", {}).get(path)
    except (ValueError, AttributeError):
        return None


def verify(path: str, *, root: Path = ROOT, manifest: str = MANIFEST, reporter: str | None = None,
           mention: str | None = None) -> dict:
    """{"ok": True, "frozen_by", "sha256"} or {"ok": False, "reason"}: `path` (from `root`, the git repository the
    manifest sits in) is frozen by the first commit whose manifest holds it, and may be reported as held out only if
    that entry is the entry now, the file then and on disk hash to it, and no later commit changed file or entry.
    `reporter`: the code reporting it, first committed (naming `mention`, if given) after the freezing commit."""
    try:
        entry = json.loads((root / manifest).read_text()).get("files", {}).get(path)
    except (OSError, ValueError) as e:
        return {"ok": False, "reason": f"{manifest} unreadable: {e}"}
    if not entry or "sha256" not in entry:
        return {"ok": False, "reason": f"{path} has no entry in {manifest}"}
    log = _git(root, "log", "--format=%H", "--reverse", "--", manifest)
    commits = log.stdout.decode().split() if log.returncode == 0 else []
    frozen_by = next((c for c in commits if _entry_at(root, c, manifest, path) is not None), None)
    if frozen_by is None:
        return {"ok": False, "reason": f"{path}: no commit holds its manifest entry (not frozen)"}
    later = commits[commits.index(frozen_by):]
    changed = [c for c in later if _entry_at(root, c, manifest, path) != _entry_at(root, frozen_by, manifest, path)]
    if changed or _entry_at(root, frozen_by, manifest, path) != entry:
        return {"ok": False, "reason": f"{path}: its manifest entry changed after the freezing commit {frozen_by[:12]}"}
    want = entry["sha256"]
    blob = _git(root, "show", f"{frozen_by}:{path}")
    if blob.returncode != 0 or hashlib.sha256(blob.stdout).hexdigest() != want:
        return {"ok": False, "reason": f"{path}: the file in the freezing commit {frozen_by[:12]} does not hash to "
                                       "its manifest entry"}
    after = _git(root, "log", "--format=%H", f"{frozen_by}..HEAD", "--", path).stdout.decode().split()
    if after:
        return {"ok": False, "reason": f"{path}: changed by {after[-1][:12]} after the freezing commit "
                                       f"{frozen_by[:12]}"}
    try:
        now = hashlib.sha256((root / path).read_bytes()).hexdigest()
    except OSError as e:
        return {"ok": False, "reason": f"{path}: unreadable: {e}"}
    if now != want:
        return {"ok": False, "reason": f"{path}: the file on disk does not hash to its manifest entry"}
    if reporter is not None:
        pick = [f"-S{mention}"] if mention else []
        first = _git(root, "log", "--format=%H", "--reverse", *pick, "--", reporter).stdout.decode().split()
        if first and (first[0] == frozen_by
                      or _git(root, "merge-base", "--is-ancestor", frozen_by, first[0]).returncode != 0):
            return {"ok": False, "reason": f"{path}: frozen by {frozen_by[:12]}, not before {reporter} "
                                           f"(first committed in {first[0][:12]})"}
    return {"ok": True, "frozen_by": frozen_by, "sha256": want}
