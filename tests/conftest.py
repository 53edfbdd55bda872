"""Shared fixtures: a real Redis (found or started), a real database (pytest-django), Chromium discovery."""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path
from urllib.parse import urlparse

import pytest
import redis as redis_lib

from deploy.run_local import MACHINE_TMP
from tests.support import PrivateRedis

# Every trainer, CLI and web process a test starts shares this control key (commands are HMAC-signed with it).
TEST_CONTROL_KEY = "test-control-key-0123456789abcdef"
os.environ.setdefault("OBS_CONTROL_KEY", TEST_CONTROL_KEY)

# XLA's CPU backend at optimisation level 0 for this process, its xdist workers and every process a test starts
# (trainers through the CLI, ladders, benches, `make run`): set here, in the controller, before the workers start, so
# all inherit it. A trainer started through the CLI on the tiny config with an empty compilation cache took 12.3 CPU-s
# instead of 16.7 to its third step (three interleaved pairs, load1 15-22); with the cache warm, 5.7 instead of 5.3 (one
# pair: a step costs a little more). The programs compute the same things, and no test asserts their speed (the bench
# smokes file theirs in a temporary directory). XLA_FLAGS is part of the persistent compilation cache's key, so one
# value everywhere keeps in-process tests and trainer subprocesses on the same var/jax-cache entries, and the suite's
# level-0 programs apart from `make run`'s. A level already in XLA_FLAGS wins (the multi-device tests set the whole
# variable for their children, the level included).
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_backend_optimization_level=0".strip()

# Tests FLUSHDB their own database only (a developer's runs live in db 0; the benches use 14 and 5). Each test
# session, and each xdist worker, locks a different database (two checkouts, CI beside a developer, `-n` workers).
TEST_REDIS_DBS = (15, 13, 12, 11, 10, 9, 8, 7, 6, 4, 3, 2, 1)


def _lock_test_db() -> int | None:
    """One of TEST_REDIS_DBS, locked for this process's life (None: all are held by other sessions or workers)."""
    import fcntl

    for db in TEST_REDIS_DBS:
        f = open(MACHINE_TMP / f"observatory-test-redis-db{db}.lock", "w")  # machine-wide: not $TMPDIR
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.close()
            continue
        _held_locks.append(f)  # held until the process exits
        return db
    return None


_held_locks: list = []


def _reachable(url: str) -> bool:
    try:
        redis_lib.Redis.from_url(url, socket_connect_timeout=0.5).ping()
        return True
    except Exception:
        return False


@pytest.fixture(scope="session")
def redis_url():
    """A database of its own on REDIS_URL's server if reachable, else on 127.0.0.1:6379; else (no server, or every
    test database taken by other sessions or xdist workers) a private redis-server for this session."""
    base = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    if not _reachable(base):
        base = "redis://127.0.0.1:6379/0"
    db = _lock_test_db() if _reachable(base) else None
    private = None
    if db is None:
        private = PrivateRedis()
        try:
            private.start()
        except RuntimeError as e:  # no redis-server on PATH
            pytest.exit(f"no test Redis database free and {e}", 2)
        base, db = private.url, 0
    u = urlparse(base)
    url = f"{u.scheme}://{u.netloc}/{db}"
    os.environ["REDIS_URL"] = url  # children (trainer, ingest, uvicorn) started by tests inherit it
    yield url
    if private:
        private.close()


@pytest.fixture
def private_redis(tmp_path):
    """A redis-server of the test's own (tests.support.PrivateRedis), not started yet; stopped at teardown."""
    r = PrivateRedis(tmp_path)
    yield r
    r.stop()


@pytest.fixture
def redis_client(redis_url):
    """A client on the test database, emptied before each test."""
    client = redis_lib.Redis.from_url(redis_url)
    client.flushdb()
    yield client
    client.close()


@pytest.fixture
def run_id():
    return f"t-{uuid.uuid4().hex[:10]}"


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser"):
        p = shutil.which(name)
        if p:
            return p
    return None


CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture
def caps(monkeypatch):
    """Telemetry stream caps scaled by 1/1000, checked after every write (observatory.streams.trim)."""
    from observatory import contract

    monkeypatch.setattr(contract, "STREAM_MAXLEN", 1000)
    monkeypatch.setattr(contract, "STREAM_HARD_MAXLEN", 2000)
    monkeypatch.setattr(contract, "TRIM_EVERY_S", 0.0)


# ---------------------------------------------------------------------------------------------- one rule, one place
# Tricky inputs for the rules the trainer, the CLI, the web and the client share. The contract decides each verdict
# (tests/observatory/test_rules.py pins them); every entry point's test checks it answers the same.
RUN_ID_CASES = ("demo", "a.b_c-d", "A" * 64, "A" * 65, "", "-lead", ".hidden", "ünïcode", "١٢٣", "run\n", "has space",
                "x/y")
COMMAND_ID_CASES = ("cmd-0001", "web-" + "f" * 32, "a:b.c_d-e", "x" * 200, "x" * 201, "short-1", "", "has space",
                    "ünïcode-id", "newline-1\n", "semi;colon-1")
MIXTURE_CASES = ({"a": 0.7, "b": 0.3}, {"a": 1, "b": 2}, {"a": 0.5, "b": 0.4}, {"a": 1, "b": 0}, {"a": 0, "b": 0}, {},
                 {"a": -0.1, "b": 1.1}, {"a": float("nan"), "b": 1}, {"a": float("inf")}, {"a": True}, {"a": "0.5"},
                 {"a": 1e-9})


@pytest.fixture(scope="session")
def run_id_cases():
    return RUN_ID_CASES


@pytest.fixture(scope="session")
def command_id_cases():
    return COMMAND_ID_CASES


@pytest.fixture(scope="session")
def mixture_cases():
    return MIXTURE_CASES


# Seconds each test file took in a full `make test` (tests/file_durations.json, from a run's --junitxml; refresh it
# with tests/file_durations.py when files are added or get slower). Only the order of the files depends on it.
FILE_DURATIONS = Path(__file__).with_name("file_durations.json")


@pytest.hookimpl(trylast=True)  # after pytest-django's sort (db tests, transactional ones, the rest)
def pytest_collection_modifyitems(config, items):
    """The longest files first: with `-n` workers (--dist loadfile hands out whole files in this order) the long files
    start at once and the short ones fill the gaps, instead of a long file starting last and running alone at the
    end. A file the table does not list yet counts as long when it has a `slow` test (trainer runs, multi-device,
    browsers). Within a file, the order stays pytest-django's."""
    try:
        took = json.loads(FILE_DURATIONS.read_text())["files"]
    except (OSError, ValueError, KeyError):
        took = {}
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    unlisted_slow = max(took.values(), default=0.0)  # unmeasured slow files before every measured one
    root = Path(__file__).resolve().parents[1]

    def seconds(path: Path) -> float:
        rel = path.resolve().relative_to(root).as_posix() if path.is_absolute() else path.as_posix()
        return took.get(rel, unlisted_slow + 1 if path in slow else 0.0)

    items.sort(key=lambda item: -seconds(item.path))  # stable: a file's tests stay together, in their order
