"""Start-up and tear-down shared by the benches (on tests/support.py's ports, waits and process stops): a throwaway
site in subprocesses (its own SQLite file, a flushed Redis database), or Django in the bench's own process; the web
server as `make run` starts it. Imported as `_common` (bench/, a bench script's directory, is first on sys.path)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from deploy.run_local import web_command  # noqa: E402
from tests.support import free_port, stop_all, wait_port  # noqa: E402


def bench_redis_url() -> str:
    """The Redis database the benches flush and fill: BENCH_REDIS_URL, else database 14 of the local server."""
    return os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/14")


def setup_django(**defaults: str) -> None:
    """Django in this process, on webapp.settings and the environment (`defaults` fill what it leaves unset)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
    for key, value in defaults.items():
        os.environ.setdefault(key, value)
    import django

    django.setup()


def django_here(db: str) -> dict[str, str]:
    """Django in this process with debug on, on DATABASE_URL (else a SQLite file at `db`) and the bench Redis,
    migrated; the environment, for the server processes the bench starts."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "webapp.settings", "OBS_DEBUG": "1",
           "DATABASE_URL": os.environ.get("DATABASE_URL") or f"sqlite:///{db}", "REDIS_URL": bench_redis_url(),
           "PYTHONPATH": str(ROOT)}
    os.environ.update(env)
    setup_django()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return env


@contextmanager
def web_server(env: dict[str, str], cwd: Path = ROOT):
    """The web server `make run` starts (deploy/run_local.py web_command), on a free port of 127.0.0.1, from the
    tree at `cwd`; yields its process once it listens, stops it after."""
    port = free_port()
    server = subprocess.Popen(web_command("127.0.0.1", port), cwd=cwd, env=env, stdout=subprocess.DEVNULL)
    server.port = port
    try:
        wait_port(port)
        yield server
    finally:
        server.terminate()
        server.wait(10)


def throwaway_site(name: str, **extra: str) -> tuple[str, str, dict[str, str]]:
    """A flushed bench Redis database, a temporary directory, and the environment of a site with production
    settings (debug off) on a SQLite file there, migrated: (redis_url, directory, env). `extra`: more variables."""
    import redis

    redis_url = bench_redis_url()
    redis.Redis.from_url(redis_url).flushdb()
    tmp = tempfile.mkdtemp(prefix=f"obs-bench-{name}-")
    env = {**os.environ, "REDIS_URL": redis_url, "DATABASE_URL": f"sqlite:///{tmp}/bench.sqlite3",
           "OBS_DEBUG": "0", "DJANGO_SECRET_KEY": f"{name}-bench-" + "x" * 40, "OBS_SSL_REDIRECT": "0",
           "OBS_DATA_DIR": tmp, "PYTHONUNBUFFERED": "1", "OBS_LOG_LEVEL": "WARNING", **extra}
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput"], cwd=ROOT, env=env, check=True,
                   stdout=subprocess.DEVNULL)
    return redis_url, tmp, env


def site_processes(env: dict[str, str], port: int, server: str = "uvicorn") -> list[subprocess.Popen]:
    """The web server `make run` starts (uvicorn, or daphne) on `port`, and one `manage.py ingest`."""
    return [subprocess.Popen(web_command("127.0.0.1", port, server), cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL),
            subprocess.Popen([sys.executable, "manage.py", "ingest", "--block-ms", "100"], cwd=ROOT, env=env,
                             stderr=subprocess.DEVNULL)]


def close_site(procs: list[subprocess.Popen], tmp: str) -> None:
    """Stop a throwaway site's processes and remove its directory."""
    stop_all(procs, 10)
    shutil.rmtree(tmp, ignore_errors=True)
