"""The one bench harness: it starts the stack a bench needs and tears it down, and files the bench's result.

A bench is its measurement and its report only; what it runs against comes from here:
- Redis: the bench database of the local server (BENCH_REDIS_URL, else db 14), flushed, or a private redis-server
  (tests.support.PrivateRedis); the database: a throwaway SQLite file (or DATABASE_URL), migrated;
- processes, all tracked by a `Stack` and stopped when it closes: `manage.py ingest`, the web server as `make run`
  starts it (deploy/run_local.py's web_command), `manage.py relay`, the nginx + nchan push tier (run_local's
  nchan_config), a headless Debian Chromium through Playwright;
- the demo trainer's telemetry without its compute (SyntheticTrainer), a tap on the run's live log;
- `report(topic, result, ...)`: the JSON on stdout and appended to bench/results/<topic>.json with the machine, its
  load, the commit and the date (BENCH_RESULTS_DIR elsewhere; `--no-save` nowhere); bench/report.py renders them.
Only this module imports deploy/ (its public helpers); benches import this module, never each other's internals.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from contextlib import ExitStack, contextmanager
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for _p in (str(ROOT / "bench"), str(ROOT)):  # after sys.path[0]: a tree put first (query.py --compare) stays first
    if _p not in sys.path:
        sys.path.insert(1, _p)

import psutil  # noqa: E402

from deploy.run_local import free_port, nchan_config, push_tier_missing, web_command  # noqa: E402,F401
from tests.support import PrivateRedis, listening, stop_all, wait_for, wait_port  # noqa: E402,F401

RESULTS = Path(os.environ.get("BENCH_RESULTS_DIR", ROOT / "bench" / "results"))
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


# --- results -----------------------------------------------------------------------------------------------------
def machine() -> dict:
    """Where a figure was measured: the CPUs, their load (1 minute) and memory."""
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else ""
    return {"host": platform.node(), "cpus": os.cpu_count(), "cpu": cpu, "load1": round(os.getloadavg()[0], 2),
            "mem_gb": round(psutil.virtual_memory().total / 2**30, 1), "python": platform.python_version()}


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
    """A bench's last act: its JSON on stdout (indented unless as_json), and the run filed under bench/results/."""
    print(json.dumps(result, indent=None if as_json else 2, default=str))
    if saved and "--no-save" not in sys.argv:
        print(f"filed in {save(topic, result, [a for a in sys.argv[1:]])}", file=sys.stderr)
    return 0


def add_save_flag(ap) -> None:
    ap.add_argument("--no-save", action="store_true", help="print the result only (no bench/results/ entry)")


# --- numbers and waits -------------------------------------------------------------------------------------------
def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q / 100 * (len(xs) - 1))))]


def wait_http(url: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=1).read()
            return
        except Exception:
            time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer in {timeout}s")


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
    """What a bench runs against, torn down in reverse when the `with` block ends. Stack(name) alone is a temporary
    directory; `site()` adds Redis (the bench db flushed, or private=True: a redis-server of its own) and a migrated
    database with production settings (debug off); ingest(), web(), relay(), push_tier(), browser() start the rest.
    Every process started through it is stopped at the end (SIGTERM, then kill)."""

    def __init__(self, name: str):
        super().__init__()
        self.name, self.procs = name, []
        self.tmp, self.keep = tempfile.mkdtemp(prefix=f"obs-bench-{name}-"), False  # keep: the directory stays
        self.callback(lambda: self.keep or shutil.rmtree(self.tmp, True))
        self.redis_url, self.env = bench_redis_url(), dict(os.environ)

    def site(self, private_redis: bool = False, database_url: str = "", migrate: bool = True, **extra: str):
        if private_redis:
            redis = PrivateRedis(self.tmp)
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

    def push_tier(self, web_port: int, relay: bool = True, conn_limit: int | None = None
                  ) -> tuple[int, list[subprocess.Popen]]:
        """nginx + nchan as `make run` configures it, in front of the web server at web_port, and the relay (unless
        relay=False); returns (nginx's port, [nginx, relay]). The environment gains OBS_LIVE_PUSH_URL. conn_limit:
        sockets per client address instead of push.conf's (a bench's viewers all come from 127.0.0.1)."""
        missing = push_tier_missing()
        if missing:
            raise RuntimeError(f"the push tier cannot start: {missing}")
        port, pub_port, var = free_port(), free_port(), Path(self.tmp)
        for sub in ("nginx", "logs"):
            (var / sub).mkdir(parents=True, exist_ok=True)
        conf = var / "nginx" / "nginx.conf"
        conf.write_text(nchan_config(var, "127.0.0.1", port, web_port, pub_port, conn_limit=conn_limit))
        self.env["OBS_LIVE_PUSH_URL"] = f"http://127.0.0.1:{pub_port}/pub/runs/"
        nginx = self.start(["nginx", "-c", str(conf), "-p", str(var / "nginx"), "-e",
                            str(var / "logs" / "nginx-error.log")], quiet=False)
        procs = [nginx, self.relay()] if relay else [nginx]
        wait_port(port, 30)
        return port, procs

    def browser(self):
        """A headless Debian Chromium (Playwright), closed with the stack; RuntimeError if none is installed."""
        path = chromium_path()
        if not path:
            raise RuntimeError("no Debian chromium on PATH (apt-get install -y chromium)")
        from playwright.sync_api import sync_playwright

        pw = self.enter_context(sync_playwright())
        browser = pw.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)
        self.callback(browser.close)
        return browser


def chromium_path() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@contextmanager
def web_server(env: dict[str, str], cwd: Path = ROOT):
    """The web server `make run` starts, on a free port (`.port`), from the tree at `cwd`, on `env`."""
    with Stack("web") as stack:
        stack.env = env
        yield stack.web(cwd=cwd)


# --- the demo trainer's telemetry --------------------------------------------------------------------------------
DOMAINS = ("docs_text", "docstrings", "licenses", "python_stdlib")
LAYERS, EXPERTS = 4, 16


def demo_names() -> list[str]:
    """The demo trainer's per-step metric names (training/configs/demo.toml), as a run of it publishes them."""
    names = ["grad/norm/embed", "grad/norm/final_norm", "grad/norm/total", "params/norm/total", "moe/drop_fraction",
             "optim/learning_rate", "optim/lr_multiplier", "optim/total_steps", "optim/update_norm", "mixture/stage",
             "throughput/mfu", "throughput/tokens_per_second", "throughput/total_tokens", "time/compute_s",
             "time/data_s", "time/host_s", "time/step_s", "train/aux_loss", "train/cross_entropy_loss",
             "train/finite", "train/loss"]
    names += [f"{p}/{d}" for d in DOMAINS for p in ("data/tokens_seen", "mixture/weight", "train/loss")]
    for i in range(LAYERS):
        names += [f"grad/norm/layers/{i}/{w}" for w in (
            "attn_norm", "mlp_norm", "moe/experts/w_down", "moe/experts/w_gate", "moe/experts/w_up", "moe/router",
            "moe/shared/w_down", "moe/shared/w_gate", "moe/shared/w_up", "wk", "wo", "wq", "wv")]
        r = f"train/router/layer_{i}/"
        names += [r + w for w in ("capacity_overflow_rate", "load_balancing_loss", "max_mean_load",
                                  "router_z_loss", "routing_entropy")]
        names += [f"{r}{w}/{e}" for w in ("router_bias", "routing_hist") for e in range(EXPERTS)]
    return names


def dashboard_subscription(names: list[str]) -> list[str]:
    """What a browser with the default dashboard subscribes to: ~34 of the ~240 series."""
    want = {"train/loss", "train/cross_entropy_loss", "optim/learning_rate", "grad/norm/total",
            "throughput/tokens_per_second", "throughput/mfu", "moe/drop_fraction", "mixture/stage",
            "train/router/layer_0/max_mean_load", "train/router/layer_0/capacity_overflow_rate"}
    return [n for n in names if n in want or n.startswith(("train/loss/", "mixture/weight/",
                                                             "train/router/layer_0/routing_hist/"))]


class SyntheticTrainer(threading.Thread):
    """The demo trainer's telemetry without its compute: run/state/heartbeat messages and one full-width metrics
    record per step at `rate` steps/s, through the trainer's own Publisher."""

    def __init__(self, redis_url: str, run_id: str, rate: float):
        super().__init__(daemon=True)
        from observatory.streams import Publisher

        self.pub = Publisher(redis_url, run_id)
        self.rate, self.names = rate, demo_names()
        self.stop = threading.Event()
        self.step = -1

    def run(self) -> None:
        self.pub.publish("run", {"name": "fanout bench", "config": {}})
        self.pub.publish("state", {"state": "training", "step": 0, "detail": ""})
        t0, k = time.monotonic(), 0
        while not self.stop.is_set():
            k += 1
            self.stop.wait(max(0.0, t0 + k / self.rate - time.monotonic()))
            self.step += 1
            s = self.step
            vals = {n: 1.0 / (1 + (s + i) % 97) for i, n in enumerate(self.names)}
            vals["train/loss"] = 5.0 / (1 + s / 100)
            self.pub.metrics(s, vals)
            if s % int(2 * self.rate) == 0:
                self.pub.publish("heartbeat", {"phase": "training", "step": s, "tokens": s * 1024,
                                               "token_budget": 10**9, "eta_s": None, "steps_per_s": self.rate,
                                               "since_step_s": 0.0, "pid": os.getpid()})
        self.pub.close()


class PushTap(threading.Thread):
    """Reads the run's live log like a web replica and the relay do and notes when ingest appended each step:
    splits a viewer's delay into publish -> the log (ingest) and the log -> viewer (the fan-out)."""

    def __init__(self, redis_url: str, run_id: str):
        super().__init__(daemon=True)
        import redis

        from observatory import contract

        self.r = redis.Redis.from_url(redis_url)
        self.key = contract.run_key(run_id, "live")  # webapp.live.livelog.log_key (no Django here)
        self.pushed: dict[int, float] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        cursor = "$"
        while not self.stop.is_set():
            reply = self.r.xread({self.key: cursor}, count=100, block=200)
            now = time.time()
            for _key, entries in reply or ():
                for entry_id, fields in entries:
                    cursor = entry_id
                    for frame in json.loads(fields[b"f"]):
                        for s in (frame.get("series") or {}).get("train/loss", {}).get("steps", []):
                            self.pushed.setdefault(s, now)


def publish_times(redis_url: str, run_id: str) -> dict[int, float]:
    """step -> the time its metrics entry was published (`data.t`), from the run's telemetry stream."""
    import redis

    from observatory import contract

    r = redis.Redis.from_url(redis_url, decode_responses=True)
    return {d["step"]: d["t"] for _id, f in r.xrange(contract.telemetry_stream(run_id)) if f.get("kind") == "metrics"
            for d in [json.loads(f["data"])]}
