"""Every `manage.py` and `python -m` command that README.md and docs/*.md show runs as written after `make run`:
from a clean shell (no OBS_DEBUG, no DJANGO_SECRET_KEY), with the data folder prepared by make run's own function
(deploy/run_local.py: var/control.key and the development secret key var/secret.key)."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys

import pytest

from ..servers import ROOT

sys.path.insert(0, str(ROOT / "deploy"))
from run_local import key_file, prepare_keys  # noqa: E402

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# `manage.py <command>`, and `python -m <module> [subcommand ...]` (words followed by a space or the code's end, so
# `fit ladder.csv` keeps `fit` and drops the file name)
MANAGE_RE = re.compile(r"manage\.py ([a-z_]+)")
MODULE_RE = re.compile(r"python3? -m ([A-Za-z_][\w.]*)((?: [a-z][a-z-]*(?=[\s`]|$))*)")


def documented_commands() -> list[list[str]]:
    found: dict[str, list[str]] = {}
    for doc in DOCS:
        text = re.sub(r"\s+", " ", doc.read_text())  # a command in inline code may wrap onto the next line
        for m in MANAGE_RE.finditer(text):
            found.setdefault(f"manage.py {m[1]}", ["manage.py", m[1]])
        for m in MODULE_RE.finditer(text):
            argv = ["-m", m[1], *m[2].split()]
            found.setdefault(" ".join(argv), argv)
    return [found[k] for k in sorted(found)]


COMMANDS = documented_commands()


def clean_env(data_dir) -> dict:
    """A new shell after `make run`: none of the project's variables, the data folder make run prepared."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OBS_", "DJANGO_", "REDIS_", "DATABASE_", "PYTHON"))}
    return {**env, "OBS_DATA_DIR": str(data_dir)}


@pytest.fixture
def var_after_make_run(tmp_path):
    prepare_keys({}, tmp_path)
    return tmp_path


def test_the_docs_show_the_commands_a_new_user_needs():
    names = {" ".join(c) for c in COMMANDS}
    for expected in ("manage.py grant", "manage.py import_wandb", "-m training run", "-m training data prepare",
                     "-m training control", "-m observatory.scaling fit", "-m observatory.anomalies scan"):
        assert expected in names, sorted(names)
    assert "-m observatory.scaling fit ladder" not in names  # a file name is not a subcommand


@pytest.mark.parametrize("argv", COMMANDS, ids=[" ".join(c) for c in COMMANDS])
def test_a_documented_command_runs_without_debug_or_a_secret_key(argv, var_after_make_run):
    out = subprocess.run([sys.executable, *argv, "--help"], cwd=ROOT, env=clean_env(var_after_make_run),
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "usage:" in out.stdout.lower()


def test_make_run_keeps_a_development_secret_key_made_once_and_private(tmp_path):
    env: dict[str, str] = {}
    prepare_keys(env, tmp_path)
    key = tmp_path / "secret.key"
    first = key.read_text()
    assert len(first.strip()) >= 32 and stat.S_IMODE(key.stat().st_mode) == 0o600
    assert key_file("secret.key", tmp_path).read_text() == first  # the same key on every make run
    assert env == {"OBS_CONTROL_KEY_FILE": str(tmp_path / "control.key")}
    prepare_keys({"DJANGO_SECRET_KEY": "set-by-the-user"}, other := tmp_path / "other")
    assert not (other / "secret.key").exists()


@pytest.mark.slow
def test_grant_works_as_the_readme_shows_after_make_run(var_after_make_run):
    env = clean_env(var_after_make_run)

    def manage(*args, **extra):
        return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env={**env, **extra},
                              capture_output=True, text=True)

    assert manage("migrate", "--noinput").returncode == 0
    made = manage("createsuperuser", "--noinput", "--username", "ada", "--email", "ada@example.org",
                  DJANGO_SUPERUSER_PASSWORD="a-long-password-1")
    assert made.returncode == 0, made.stderr[-2000:]
    out = manage("grant", "ada", "moderator")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "ada: granted moderator" in out.stdout


def test_without_that_file_production_still_refuses_to_start(tmp_path):
    out = subprocess.run([sys.executable, "manage.py", "grant", "--help"], cwd=ROOT, env=clean_env(tmp_path),
                         capture_output=True, text=True)
    assert out.returncode != 0 and "DJANGO_SECRET_KEY or DJANGO_SECRET_KEY_FILE must be set" in out.stderr
