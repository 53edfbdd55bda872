"""The one bench harness: it starts the stack a bench needs, tears it down, and files the bench's result.

`Stack` runs Redis (the bench database, flushed, or a private redis-server), a migrated throw-away database
(SQLite or PostgreSQL), `manage.py ingest` and `relay`, the web server and the nginx + nchan push tier as `make run`
starts them (deploy/run_local.py), and a headless Chromium; `django_here` sets Django up in this process. Also:
the synthetic trainer's telemetry (bench/telemetry.py, re-exported), `parser` (a bench's command line), numbers and
CPU/RSS readers, and `report` (JSON on stdout, appended to bench/results/<topic>.json with machine, load, commit
and date). Only this module imports deploy/; benches import it, never each other's internals.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import ExitStack, closing, contextmanager
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parent.parent
for _p in (str(ROOT / "bench"), str(ROOT)):  # after sys.path[0]
    if _p not in sys.path:
        sys.path.insert(1, _p)

import psutil  # noqa: E402

from deploy.run_local import free_port, nchan_config, push_tier_missing, web_command  # noqa: E402,F401
from tests.support import PrivateRedis, listening, stop_all, wait_for, wait_port  # noqa: E402,F401
from telemetry import (PushTap, SyntheticTrainer, dashboard_subscription, demo_names,  # noqa: E402,F401 (re-exported)
                       drained, heartbeat, liveview_values, publish_times, sawtooth)

RESULTS = Path(os.environ.get("BENCH_RESULTS_DIR", ROOT / "bench" / "results"))
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
# A bench's browser has no GPU (every redrawn canvas is handed to the compositor as a software bitmap), or with --gpu
# SwiftShader's: canvases and compositing GPU-backed, as in users' browsers (chrome://gpu checked: Stack.browser).
GPU_ARGS = {False: ["--disable-gpu"], True: ["--use-angle=swiftshader", "--enable-unsafe-swiftshader"]}


# --- results -----------------------------------------------------------------------------------------------------
def machine() -> dict:
    """Where a figure was measured: the CPUs, their load (1 minute), memory and numpy's BLAS kernel."""
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else ""
    return {"host": platform.node(), "cpus": os.cpu_count(), "cpu": cpu, "load1": round(os.getloadavg()[0], 2),
            "mem_gb": round(psutil.virtual_memory().total / 2**30, 1), "python": platform.python_version(),
            "blas": blas_core()}


def blas_core() -> str:
    """numpy's own OpenBLAS kernel (Haswell, SkylakeX; OPENBLAS_CORETYPE picks it): fits' last bits differ by it."""
    libs = [ln.split()[-1] for ln in Path("/proc/self/maps").read_text().splitlines() if "libscipy_openblas64_" in ln]
    get = ctypes.CFUNCTYPE(ctypes.c_char_p)(("scipy_openblas_get_corename64_", ctypes.CDLL(libs[0]))) if libs else None
    return get().decode() if get else ""


def commit(tree: Path = ROOT) -> str:
    """The checkout's commit (short id), `+dirty` when it has uncommitted changes."""
    try:
        rev = subprocess.run(["git", "rev-parse", "--short=10", "HEAD"], cwd=tree, capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=tree,
                               capture_output=True, text=True).stdout.strip()
        return rev + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def save(topic: str, result: dict, argv: list[str] | None = None) -> Path:
    """Append one run to bench/results/<topic>.json: {"topic", "runs": [{date, commit, machine, argv, result}]}."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{topic}.json"
    doc = json.loads(path.read_text()) if path.exists() else {"topic": topic, "runs": []}
    doc["runs"].append({"date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "commit": commit(),
                        "machine": machine(), "argv": list(sys.argv[1:] if argv is None else argv),
                        "result": result})
    path.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    return path


def report(topic: str, result: dict, as_json: bool = True, saved: bool = True) -> int:
    """A bench's last act (`return report(...)`: 0): its JSON on stdout, and the run filed under bench/results/."""
    print(json.dumps(result, indent=None if as_json else 2, default=str))
    if saved and "--no-save" not in sys.argv:
        print(f"filed in {save(topic, result)}", file=sys.stderr)
    return 0


def parser(doc: str, *topics: str, db: str = "", page: bool = False, **kw) -> argparse.ArgumentParser:
    """A bench's command line: its docstring for --help, where `topics` are told, --json, --no-save; with `db` --db (a
    SQLite file kept between runs in the temporary directory, unless DATABASE_URL is set); with `page` (a page in
    Chromium) --gpu, --cpu-throttle and --compare (another tree measured in the same run: compared())."""
    told = ", ".join(f"`{t}`" for t in topics)
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter, epilog=(
        f"What it measures and how: {told} in docs/PERFORMANCE.md (bench/results/<topic>.md)" if topics else None),
        **kw)
    ap.add_argument("--json", action="store_true", help="print the JSON object on one line")
    ap.add_argument("--no-save", action="store_true", help="print the result only (no bench/results/ entry)")
    if page:
        ap.add_argument("--gpu", action="store_true", help="a browser with SwiftShader's GPU: canvases as users have")
        ap.add_argument("--cpu-throttle", type=throttle, default=1.0, metavar="N",
                        help="slow the page's CPU N times (4: a phone)")
        ap.add_argument("--compare", metavar="COMMIT_OR_DIR", help="another tree (a commit, checked out for the run, "
                        "or a directory; e.g. what has landed), measured beside this one in the same run")
    if db:
        ap.add_argument("--db", default=os.path.join(tempfile.gettempdir(), f"obs-bench-{db}.sqlite3"))
    return ap


def throttle(text: str) -> float:
    if float(text) < 1:
        raise argparse.ArgumentTypeError("at least 1 (1: no throttling)")
    return float(text)


def compared(this: dict, other: dict, tree: str, keys: str) -> dict:
    """A page measured on this tree and on `tree` in the same run: both, and this over other for each dotted key of
    `keys` (space-separated; None where either side lacks it)."""
    def at(d: dict, key: str):
        for part in key.split("."):
            d = (d or {}).get(part)
        return d
    ratio = {k: round(at(this, k) / at(other, k), 3) if at(this, k) is not None and at(other, k) else None
             for k in keys.split()}
    return {"this": this, "other": {"tree": tree, **other}, "ratio_this_over_other": ratio}


# --- numbers and waits -------------------------------------------------------------------------------------------
def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q / 100 * (len(xs) - 1))))]


def med(xs, digits: int = 1) -> float:
    return round(statistics.median(xs), digits)


def timed_ms(fn, repeat: int) -> list[float]:
    """Milliseconds of each of `repeat` calls of fn()."""
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return out


def wait_http(url: str, timeout: float = 30) -> None:
    def answers() -> bool:
        try:
            return urllib.request.urlopen(url, timeout=1).read() is not None
        except Exception:
            return False
    wait_for(answers, timeout, f"{url} to answer", 0.2)


def cpu_s(procs: list[psutil.Process], user_only: bool = False) -> float:
    """CPU seconds of procs and their children: user + kernel, or user space alone."""
    total = 0.0
    for p in procs:
        try:
            for q in [p, *p.children(recursive=True)]:
                t = q.cpu_times()
                total += t.user + (0 if user_only else t.system)
        except psutil.Error:
            pass
    return total


def proc_cpu_s(pid: int) -> float:
    """CPU seconds (user + kernel) one process has used so far; 0.0 where it cannot be read."""
    try:
        t = psutil.Process(pid).cpu_times()
        return t.user + t.system
    except psutil.Error:
        return 0.0


def rss_mb(procs: list[psutil.Process]) -> float:
    total = 0
    for p in procs:
        try:
            total += sum(q.memory_info().rss for q in [p, *p.children(recursive=True)])
        except psutil.Error:
            pass
    return round(total / 2**20, 1)


# --- Django in this process --------------------------------------------------------------------------------------
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


def django_here(db: str, debug: bool = True) -> dict[str, str]:
    """Django in this process (debug on, or production settings with a throwaway key), on DATABASE_URL (else a
    SQLite file at `db`) and the bench Redis, migrated; the environment, for the server processes it starts."""
    if not debug:
        os.environ.setdefault("DJANGO_SECRET_KEY", "bench-only-" + "x" * 40)
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "webapp.settings", "OBS_DEBUG": "1" if debug else "0",
           "DATABASE_URL": os.environ.get("DATABASE_URL") or f"sqlite:///{db}", "REDIS_URL": bench_redis_url(),
           "PYTHONPATH": str(ROOT)}
    os.environ.update(env)
    setup_django()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return env


# --- the stack ---------------------------------------------------------------------------------------------------
class Stack(ExitStack):
    """What a bench runs against, torn down in reverse when the `with` block ends: a temporary directory; `site()`
    adds Redis and a migrated database (production settings); ingest(), web(), relay(), push_tier(), browser() start
    the rest. Every process started through it is stopped at the end (SIGTERM, then kill)."""

    def __init__(self, name: str):
        super().__init__()
        self.name, self.procs = name, []
        self.tmp, self.keep = tempfile.mkdtemp(prefix=f"obs-bench-{name}-"), False  # keep: the directory stays
        self.callback(lambda: self.keep or shutil.rmtree(self.tmp, True))
        self.redis_url, self.env = bench_redis_url(), dict(os.environ)

    def site(self, private_redis: bool | PrivateRedis = False, database_url: str = "", migrate: bool = True,
             **extra: str):
        """private_redis: True, a redis-server of its own started now; or the bench's PrivateRedis (it starts it)."""
        if private_redis:
            redis = PrivateRedis(self.tmp) if private_redis is True else private_redis
            if private_redis is True:
                redis.start()
            self.callback(redis.stop)
            self.redis, self.redis_url = redis, redis.url
        else:
            import redis

            redis.Redis.from_url(self.redis_url).flushdb()
        self.env.update({"REDIS_URL": self.redis_url, "OBS_DATA_DIR": self.tmp, "PYTHONUNBUFFERED": "1",
                         "DATABASE_URL": database_url or f"sqlite:///{self.tmp}/bench.sqlite3", "OBS_DEBUG": "0",
                         "DJANGO_SECRET_KEY": f"{self.name}-bench-" + "x" * 40, "OBS_SSL_REDIRECT": "0",
                         "OBS_LOG_LEVEL": "WARNING", "PYTHONPATH": str(ROOT), **extra})
        if migrate:
            self.manage("migrate", "--noinput", check=True)
        return self

    def database(self, backend: str = "sqlite") -> str:
        """A throw-away database's URL, for site(): a SQLite file in the stack's directory, or (postgresql) a database
        of its own on the server at OBS_BENCH_PG, dropped when the stack closes."""
        if backend == "sqlite":
            return f"sqlite:///{self.tmp}/bench.sqlite3"
        import psycopg

        server = os.environ.get("OBS_BENCH_PG", "postgres://postgres@127.0.0.1:5432/").rstrip("/")
        name = f"obs_bench_{self.name}_{os.getpid()}".replace("-", "_")

        def sql(statement: str) -> None:
            with psycopg.connect(server + "/postgres", autocommit=True) as c:
                c.execute(statement)
        sql(f"DROP DATABASE IF EXISTS {name}")
        sql(f"CREATE DATABASE {name}")
        self.callback(sql, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        return f"{server}/{name}"

    def sql(self, statement: str) -> list:
        """The rows of one statement on the site's database."""
        url = self.env["DATABASE_URL"]
        if url.startswith("sqlite"):
            import sqlite3

            with closing(sqlite3.connect(urlparse(url).path)) as c:
                return c.execute(statement).fetchall()
        import psycopg

        with psycopg.connect(url, autocommit=True) as c:
            cur = c.execute(statement)
            return cur.fetchall() if cur.description else []

    def manage(self, *args: str, check: bool = False) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=self.env, check=check,
                              stdout=subprocess.DEVNULL)

    def start(self, cmd: list[str], cwd: Path = ROOT, quiet: bool = True, log: Path | None = None,
              **kw) -> subprocess.Popen:
        """A process of the stack (its output dropped, shown, or appended to `log`), stopped when it closes."""
        if not self.procs:  # stopped before what was set up earlier (Redis), after what is registered later
            self.callback(lambda: stop_all(self.procs, 15))
        out = self.enter_context(open(log, "ab")) if log else subprocess.DEVNULL if quiet else None
        proc = subprocess.Popen(cmd, cwd=cwd, env=kw.pop("env", self.env), stdout=out,
                                stderr=subprocess.STDOUT if log else out, **kw)
        self.procs.append(proc)
        return proc

    def ingest(self, *extra: str) -> subprocess.Popen:
        return self.start([sys.executable, "manage.py", "ingest", "--block-ms", "100", *extra], quiet=False)

    def relay(self) -> subprocess.Popen:
        """`manage.py relay`, publishing to OBS_LIVE_PUSH_URL (push_tier() sets it)."""
        return self.start([sys.executable, "manage.py", "relay", "--block-ms", "100"], quiet=False)

    def web(self, server: str = "uvicorn", cwd: Path = ROOT, wait: bool = True, port: int = 0) -> subprocess.Popen:
        """The web server `make run` starts, on a free port of 127.0.0.1 (`.port`), from the tree at `cwd`."""
        port = port or free_port()
        proc = self.start(web_command("127.0.0.1", port, server), cwd=cwd)
        proc.port = port
        if wait:
            wait_port(port, 60)
        return proc

    def push_tier(self, web_port: int, relay: bool = True, conn_limit: int | None = None, redis: str | None = None,
                  name: str = "push") -> tuple[int, list[subprocess.Popen]]:
        """nginx + nchan as `make run` configures it, in front of the web server at web_port, and the relay (unless
        relay=False); returns (nginx's port, [nginx, relay]). The environment gains OBS_LIVE_PUSH_URL. conn_limit:
        sockets per client address instead of push.conf's (a bench's viewers all come from 127.0.0.1); redis: a
        replica's channels in nchan's Redis mode at that URL (several, each its own `name`, share them)."""
        missing = push_tier_missing()
        if missing:
            raise RuntimeError(f"the push tier cannot start: {missing}")
        port, pub_port, auth_port, var = free_port(), free_port(), free_port(), Path(self.tmp) / name
        for sub in ("nginx", "logs"):
            (var / sub).mkdir(parents=True, exist_ok=True)
        conf = var / "nginx" / "nginx.conf"
        conf.write_text(nchan_config(var, "127.0.0.1", port, web_port, pub_port, auth_port, conn_limit, redis))
        self.env["OBS_LIVE_PUSH_URL"] = f"http://127.0.0.1:{pub_port}/pub/runs/"
        nginx = self.start(["nginx", "-c", str(conf), "-p", str(var / "nginx"), "-e",
                            str(var / "logs" / "nginx-error.log")], quiet=False)
        procs = [nginx, self.relay()] if relay else [nginx]
        wait_port(port, 30)
        return port, procs

    def browser(self, gpu: bool = False):
        """A headless Debian Chromium (Playwright; gpu: SwiftShader's), closed with the stack; else RuntimeError."""
        path = chromium_path()
        if not path:
            raise RuntimeError("no Debian chromium on PATH (apt-get install -y chromium)")
        from playwright.sync_api import sync_playwright

        pw = self.enter_context(sync_playwright())
        browser = pw.chromium.launch(executable_path=path, args=CHROMIUM_ARGS + GPU_ARGS[gpu])
        self.callback(browser.close)
        if gpu:  # checked: chrome://gpu's feature status says canvases and compositing are GPU-backed
            page = browser.new_page()
            page.goto("chrome://gpu")
            said = page.wait_for_function("() => (document.querySelector('info-view')?.shadowRoot?.textContent || '')"
                                          ".match(/(Canvas|Compositing): [^*\\n]*/g)").json_value()
            page.close()
            if len(said) < 2 or not all(line.split(": ", 1)[1].startswith("Hardware accelerated") for line in said):
                raise RuntimeError(f"--gpu: chrome://gpu says {said}")
        return browser


def chromium_path() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@contextmanager
def web_server(env: dict[str, str], cwd: Path = ROOT):
    """The web server `make run` starts, on a free port (`.port`), from the tree at `cwd`, on `env`."""
    with Stack("web") as stack:
        stack.env = env
        yield stack.web(cwd=cwd)
