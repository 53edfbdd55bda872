"""bench/heldout.py: a held-out file is reported only while its hash and manifest entry are those of the commit
that froze it (the first commit whose MANIFEST.json holds the entry). Real git repositories, built per test."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("heldout", ROOT / "bench" / "heldout.py")
heldout = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(heldout)

MAN = "data/MANIFEST.json"
FILE = "data/ladder.csv"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def write_manifest(repo: Path, sha: str) -> None:
    (repo / MAN).write_text(json.dumps({"files": {FILE: {"sha256": sha}}}))


def commit(repo: Path, msg: str) -> str:
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", msg)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, str]:
    git(tmp_path, "init", "-q")
    (tmp_path / "data").mkdir()
    (tmp_path / "README").write_text("before the freeze\n")
    commit(tmp_path, "start")
    (tmp_path / FILE).write_text("N,D,L\n1,2,3\n")
    write_manifest(tmp_path, hashlib.sha256((tmp_path / FILE).read_bytes()).hexdigest())
    frozen = commit(tmp_path, "freeze")
    (tmp_path / "README").write_text("tuning after the freeze\n")
    commit(tmp_path, "tune")
    return tmp_path, frozen


def check(repo: Path) -> dict:
    return heldout.verify(FILE, root=repo, manifest=MAN)


def test_a_frozen_unchanged_file_is_reported_with_the_commit_that_froze_it(repo):
    path, frozen = repo
    assert check(path) == {"ok": True, "frozen_by": frozen,
                           "sha256": hashlib.sha256((path / FILE).read_bytes()).hexdigest()}


def test_a_file_edited_on_disk_is_refused(repo):
    path, _ = repo
    (path / FILE).write_text("N,D,L\n1,2,2.9\n")
    r = check(path)
    assert not r["ok"] and "on disk" in r["reason"]


def test_a_file_and_its_entry_changed_in_a_later_commit_are_refused(repo):
    path, frozen = repo
    (path / FILE).write_text("N,D,L\n1,2,2.9\n")
    write_manifest(path, hashlib.sha256((path / FILE).read_bytes()).hexdigest())   # hash updated to match
    commit(path, "edit the held-out file after tuning")
    r = check(path)
    assert not r["ok"] and "entry changed after the freezing commit " + frozen[:12] in r["reason"]


def test_a_file_recommitted_with_its_entry_unchanged_is_refused(repo):
    path, frozen = repo
    (path / FILE).write_text("N,D,L\n1,2,2.9\n")
    edit = commit(path, "edit")
    (path / FILE).write_text("N,D,L\n1,2,3\n")      # back to the frozen bytes, but history shows the edit
    commit(path, "revert")
    r = check(path)
    assert not r["ok"] and f"changed by {edit[:12]}" in r["reason"]   # the first change after the freeze


def test_an_entry_never_committed_is_not_frozen(tmp_path):
    git(tmp_path, "init", "-q")
    (tmp_path / "data").mkdir()
    (tmp_path / FILE).write_text("x\n")
    write_manifest(tmp_path, hashlib.sha256(b"x\n").hexdigest())
    r = check(tmp_path)
    assert not r["ok"] and "not frozen" in r["reason"]


def test_a_file_without_an_entry_is_refused(repo):
    path, _ = repo
    r = heldout.verify("data/other.csv", root=path, manifest=MAN)
    assert not r["ok"] and "no entry" in r["reason"]


def test_a_file_frozen_with_or_after_the_code_that_reports_it_is_refused(repo):
    path, frozen = repo
    (path / "report.py").write_text("# scores the held-out file\n")
    assert check(path)["ok"] and heldout.verify(FILE, root=path, manifest=MAN, reporter="report.py")["ok"]
    commit(path, "the reporter, after the freeze")
    assert heldout.verify(FILE, root=path, manifest=MAN, reporter="report.py")["ok"]
    r = heldout.verify(FILE, root=path, manifest=MAN, reporter="README")      # README was committed before
    assert not r["ok"] and f"frozen by {frozen[:12]}, not before README" in r["reason"]


def test_this_repositorys_held_out_files_are_frozen():
    files = json.loads((ROOT / heldout.MANIFEST).read_text())["files"]
    assert len(files) >= 10
    if subprocess.run(["git", "-C", str(ROOT), "rev-parse"], capture_output=True).returncode != 0:
        pytest.skip("not a git checkout")
    for path in sorted(files):  # each by the code that reports it (a set added later: the commit that names it)
        if "/heldout/incidents/" in path:
            r = heldout.verify(path, reporter="bench/anomaly_cv.py", mention="heldout/incidents")
        elif "/anomalies2/" in path:
            r = heldout.verify(path, reporter="bench/anomaly_cv.py", mention="anomalies2")
        elif "/anomalies/" in path:
            r = heldout.verify(path, reporter="bench/anomaly_cv.py")
        elif path.split("/")[3] in ("ladders2", "ladders3", "ladders4", "ladders5", "ladders6",
                                   "ladders7"):
            r = heldout.verify(path, reporter="bench/scaling_cv.py", mention="heldout/" + path.split("/")[3])
        else:
            r = heldout.verify(path, reporter="bench/scaling_cv.py")
        assert r["ok"], r["reason"]


def test_a_set_frozen_after_its_reporter_existed_counts_from_the_commit_that_names_it(repo):
    path, _ = repo
    (path / "report.py").write_text("# scores the first set\n")
    commit(path, "a reporter of an earlier set")
    (path / "data" / "set2.csv").write_text("N,D,L\n4,5,6\n")
    man = json.loads((path / MAN).read_text())
    man["files"]["data/set2.csv"] = {"sha256": hashlib.sha256((path / "data" / "set2.csv").read_bytes()).hexdigest()}
    (path / MAN).write_text(json.dumps(man))
    frozen2 = commit(path, "freeze the second set")
    assert not heldout.verify("data/set2.csv", root=path, manifest=MAN, reporter="report.py")["ok"]
    assert heldout.verify("data/set2.csv", root=path, manifest=MAN, reporter="report.py", mention="set2")["ok"]
    (path / "report.py").write_text("# scores the first set and set2\n")
    commit(path, "the reporter names set2, after its freeze")
    assert heldout.verify("data/set2.csv", root=path, manifest=MAN, reporter="report.py", mention="set2")["ok"]
    # named in the freezing commit itself: refused (the code that scores it came with it)
    (path / "data" / "set3.csv").write_text("N,D,L\n7,8,9\n")
    man["files"]["data/set3.csv"] = {"sha256": hashlib.sha256((path / "data" / "set3.csv").read_bytes()).hexdigest()}
    (path / MAN).write_text(json.dumps(man))
    (path / "report.py").write_text("# scores the first set, set2 and set3\n")
    frozen3 = commit(path, "freeze set3 with its reporter")
    r = heldout.verify("data/set3.csv", root=path, manifest=MAN, reporter="report.py", mention="set3")
    assert not r["ok"] and f"frozen by {frozen3[:12]}" in r["reason"] and frozen2 != frozen3
