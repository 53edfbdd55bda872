"""`make run`: find or start Redis, prepare the database, and supervise trainer, ingest, web and Celery.

All children stop on Ctrl-C (or SIGTERM), and die with the supervisor even if it is killed -9 (PDEATHSIG),
so no orphan keeps training or holding port 8000.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import urlparse

sys.path.insert(0, str(Path(__file__).resolve().parent))  # deploy/'s modules, whether run or imported
from push_tier import NCHAN_MODULE, _RUN_RE, front_door_problem, nchan_config, push_tier_missing  # noqa: E402,F401
from supervisor import Supervisor  # noqa: E402  (restarts the push tier, nginx and the relay, when they exit)

ROOT = Path(__file__).resolve().parent.parent
VAR = Path(os.environ.get("OBS_DATA_DIR", ROOT / "var"))
PY = sys.executable
CURRENT_RUN_FILE = VAR / "current_run"


def log(msg: str) -> None:
    print(f"[observatory] {msg}", flush=True)


def redis_reachable(url: str) -> bool:
    u = urlparse(url)
    try:
        with socket.create_connection((u.hostname or "127.0.0.1", u.port or 6379), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith((b"+PONG", b"-NOAUTH"))
    except OSError:
        return False


def is_loopback(host: str) -> bool:
    """Whether a bind address reaches this machine only ("localhost", 127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


# free_port, the one of `make run`, the tests and the benches (tests/support.py re-exports it): ports handed out,
# one empty file each, in a folder every process on the machine shares.
# Machine-wide, never $TMPDIR: every process on the machine (test sessions, xdist workers, benches, `make run`) must
# see the same marks and locks, whatever temp folder each was given.
MACHINE_TMP = Path("/tmp") if os.path.isdir("/tmp") else Path(tempfile.gettempdir())
PORTS_DIR = MACHINE_TMP / "observatory-ports"
PORT_HOLD_S = 600.0


def _kernel_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the kernel's pick) and that no caller of free_port on
    this machine (another xdist worker, test session or bench) was handed in the last PORT_HOLD_S seconds: between
    the pick and its server's bind, no other process is handed the same port."""
    PORTS_DIR.mkdir(exist_ok=True)
    for _ in range(1000):
        port = _kernel_port()
        mark = PORTS_DIR / str(port)
        try:
            os.close(os.open(mark, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            return port
        except FileExistsError:
            try:
                if time.time() - mark.stat().st_mtime > PORT_HOLD_S:
                    mark.unlink()  # an old hand-out: the port may be handed out again
            except FileNotFoundError:
                pass
    raise RuntimeError(f"no port free of a hand-out in {PORTS_DIR}")


# The web server: uvicorn (uvloop, httptools, sans-I/O websockets) without per-message deflate, so that a live frame
# encoded once per run is written as is to every viewer (bench/fanout.py measured it against daphne, which still
# works: OBS_WEB_SERVER=daphne). The Dockerfile and deploy/compose.yaml use the same flags.
# `--http webapp.serving:HttpProtocol` is uvicorn's httptools protocol with a header timeout (OBS_HEADER_TIMEOUT_S;
# the body's is webapp.limits'); `--timeout-keep-alive` closes idle kept-alive connections.
UVICORN_FLAGS = ["--loop", "uvloop", "--http", "webapp.serving:HttpProtocol", "--timeout-keep-alive", "5",
                 "--ws", "websockets-sansio",
                 "--ws-per-message-deflate", "false", "--ws-max-size", str(2**20), "--lifespan", "off",
                 "--backlog", "4096", "--no-access-log", "--log-level", "warning"]


def trusted_proxies(raw: str) -> list[str]:
    """OBS_TRUSTED_PROXIES ("172.30.80.200,10.1.0.0/16") -> its networks; ValueError naming a bad entry."""
    nets = []
    for item in filter(None, (part.strip() for part in raw.split(","))):
        try:
            nets.append(str(ipaddress.ip_network(item)))
        except ValueError as e:
            raise ValueError(f"OBS_TRUSTED_PROXIES: {item!r} is not an address or network ({e}); name each proxy in "
                             "front of the web server ('*' would let any client choose its own address)") from None
    return nets


def proxy_flags() -> list[str]:
    """uvicorn reads X-Forwarded-For/-Proto only from OBS_TRUSTED_PROXIES, and from no one when it is unset (its own
    default trusts 127.0.0.1, or FORWARDED_ALLOW_IPS: any local process could then choose its address)."""
    nets = trusted_proxies(os.environ.get("OBS_TRUSTED_PROXIES", ""))
    return ["--proxy-headers", "--forwarded-allow-ips", ",".join(nets)] if nets else ["--no-proxy-headers"]


def web_command(host: str, port: int, server: str | None = None, uds: str | None = None) -> list[str]:
    """The web server on host:port, or on the unix socket `uds` (behind make run's nginx)."""
    server = server or os.environ.get("OBS_WEB_SERVER", "uvicorn")
    if server == "daphne":  # (daphne reads no proxy header unless told to, and then from anyone: never here)
        where = ["-u", uds] if uds else ["-b", host, "-p", str(port)]
        return [PY, "-m", "daphne", *where, "-v", "0", "webapp.asgi:application"]
    where = ["--uds", uds] if uds else ["--host", host, "--port", str(port)]
    return [PY, "-m", "uvicorn", *UVICORN_FLAGS, *proxy_flags(), *where, "webapp.asgi:application"]


def start_push_tier(sup: Supervisor, env: dict[str, str], host: str, port: int, var: Path | None = None) -> str:
    """Start nginx with nchan on host:port and the relay; returns the unix socket the web server must listen on, in
    a directory of its own that only this user may open: the web trusts the client address nginx passes through it
    (OBS_PROXY_SOCKET, webapp.serving.SocketProxyHeaders) and nothing else reaches it."""
    var = var or VAR
    pub_port = free_port()
    d = var / "nginx"
    d.mkdir(parents=True, exist_ok=True)
    (var / "logs").mkdir(parents=True, exist_ok=True)
    sock = os.path.join(tempfile.mkdtemp(prefix="obs-web-"), "web.sock")  # 0700; short (a socket path <= 107 bytes)
    sup.scratch.append(os.path.dirname(sock))  # (removed at stop: each make run made one more under /tmp)
    conf = d / "nginx.conf"
    conf.write_text(nchan_config(var, host, port, sock, pub_port, free_port()))
    env["OBS_LIVE_PUSH_URL"] = f"http://127.0.0.1:{pub_port}/pub/runs/"
    env["OBS_PROXY_SOCKET"] = sock
    sup.start("nginx", [shutil.which("nginx"), "-c", str(conf), "-p", str(d), "-e",
                        str(var / "logs" / "nginx-error.log")], env)
    sup.start("relay", [PY, "manage.py", "relay"], env)
    return sock


def find_or_start_redis(sup: Supervisor) -> str:
    url = os.environ.get("REDIS_URL")
    if url:
        if redis_reachable(url):
            log(f"using Redis at {url} (REDIS_URL)")
            return url
        log(f"REDIS_URL={url} is not reachable; looking for a local Redis")
    default = "redis://127.0.0.1:6379/0"
    if redis_reachable(default):
        log(f"using the local Redis at {default}")
        return default
    exe = shutil.which("redis-server")
    if not exe:
        sys.exit("[observatory] no Redis reachable and no `redis-server` on PATH.\n"
                 "  Debian/Ubuntu: sudo apt-get install -y redis-server\n"
                 "  or point REDIS_URL at a running Redis.")
    port = free_port()
    data = VAR / "redis"
    data.mkdir(parents=True, exist_ok=True)
    # Persistence on: an append-only file fsynced every second (what Redis has confirmed survives a crash of
    # Redis itself; a crash of the machine loses at most about the last second, which the trainer's publisher
    # re-sends if it lives on), plus a snapshot every 60 s for fast restarts. See README "Durability".
    sup.start("redis", [exe, "--bind", "127.0.0.1", "--port", str(port), "--dir", str(data),
                        "--appendonly", "yes", "--appendfsync", "everysec", "--save", "60 1000",
                        "--logfile", str(VAR / "logs" / "redis.log")],
              dict(os.environ))
    url = f"redis://127.0.0.1:{port}/0"
    for _ in range(100):
        if redis_reachable(url):
            log(f"started a private Redis at {url} (data under {data})")
            return url
        time.sleep(0.05)
    sup.stop()
    sys.exit("[observatory] the private redis-server did not come up; see var/logs/redis.log")


def choose_run_id(mode: str | None) -> str:
    VAR.mkdir(parents=True, exist_ok=True)
    if mode == "new" or not CURRENT_RUN_FILE.exists():
        run_id = "demo-" + datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
        CURRENT_RUN_FILE.write_text(run_id + "\n")
        log(f"new demo run {run_id}")
        return run_id
    run_id = CURRENT_RUN_FILE.read_text().strip()
    log(f"continuing demo run {run_id} from its latest checkpoint (make run RUN=new for a fresh one)")
    return run_id


def key_file(name: str, var: Path = VAR) -> Path:
    """A random key kept under var/ (made once, 0600): `control.key`, with which web and trainer sign and verify
    operator commands, and `secret.key`, the development Django secret key that settings find when no
    DJANGO_SECRET_KEY is set (so `manage.py grant ...` works after `make run` without OBS_DEBUG)."""
    import secrets

    path = var / name
    if not path.exists():
        var.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(32) + "\n")
    return path


def prepare_keys(env: dict[str, str], var: Path = VAR) -> None:
    """The keys `make run` keeps under var/, unless the environment names its own."""
    if not (env.get("OBS_CONTROL_KEY") or env.get("OBS_CONTROL_KEY_FILE")):
        env["OBS_CONTROL_KEY_FILE"] = str(key_file("control.key", var))
    if not (env.get("DJANGO_SECRET_KEY") or env.get("DJANGO_SECRET_KEY_FILE")):
        key_file("secret.key", var)


def public_url(host: str, port: int) -> str:
    return f"http://[{host.strip('[]')}]:{port}" if ":" in host else f"http://{host}:{port}"


def start_stack(sup: Supervisor, env: dict[str, str], host: str, port: int, run_id: str | None, config: str,
                var: Path | None = None, push: bool | None = None) -> str:
    """What `make run` starts once Redis is found (env["REDIS_URL"]): the database's migrations, then web, ingest,
    Celery, the push tier (nginx + nchan and the relay) unless `push` is False or it is not installed (push None),
    and the trainer on `config` when `run_id` is given. Returns the public URL (OBS_PUBLIC_URL, by default
    http://host:port): CSRF's trusted origin and every absolute link. The browser tests start the same stack."""
    var = var or VAR
    env["OBS_DATA_DIR"] = str(var)
    env.setdefault("OBS_DEBUG", "1")
    env.setdefault("OBS_PUBLIC_URL", public_url(host, port))
    env["PYTHONUNBUFFERED"] = "1"
    prepare_keys(env, var)
    log("applying database migrations...")
    subprocess.run([PY, "manage.py", "migrate", "--noinput"], cwd=ROOT, env=env, check=True,
                   stdout=subprocess.DEVNULL)
    missing = "asked for without it" if push is False else push_tier_missing()
    if missing:
        log(f"push tier off ({missing}): live updates go through the web server's hub")
        sup.start("web", web_command(host, port), env)
    else:
        sock = start_push_tier(sup, env, host, port, var)
        sup.start("web", web_command(host, port, uds=sock), env)
        log(f"push tier: nginx + nchan on {host}:{port}, the web server behind it on {sock}")
    sup.start("ingest", [PY, "manage.py", "ingest"], env)
    sup.start("celery", [PY, "-m", "celery", "-A", "webapp", "worker", "-B", "--concurrency", "1",
                         "--loglevel", "warning", "-s", str(var / "celerybeat-schedule")], env)
    if run_id:
        sup.start("trainer", [PY, "-m", "training", "run", "--config", config, "--run-id", run_id], env)
    return env["OBS_PUBLIC_URL"]


def wait_front_door(sup: Supervisor, url: str) -> str | None:
    """Once the site answers at `url` (or a child exits first), what stops browsers there, or None."""
    while not answers(url):
        if any(p.poll() is not None for name, p in sup.procs if name != "trainer"):
            return "a process exited during start (see its output above)"
        time.sleep(0.2)
    return front_door_problem(url)


def answers(url: str) -> bool:
    """Whether the web server answers at `url` (a proxy's 502 or 504 while it starts does not count)."""
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/healthz", timeout=5):
            return True
    except urllib.error.HTTPError as e:
        return e.code not in (502, 504)
    except OSError:
        return False


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--run", choices=["new", "continue"], default="continue")
    ap.add_argument("--host", default=os.environ.get("OBS_HOST", "127.0.0.1"))
    ap.add_argument("--port", type=int, default=int(os.environ.get("OBS_PORT", "8000")))
    ap.add_argument("--config", default=os.environ.get("OBS_TRAIN_CONFIG", "training/configs/demo.toml"))
    args = ap.parse_args()
    if not is_loopback(args.host) and "OBS_DEBUG" not in os.environ:
        # make run is the local mode: Django's debug pages (tracebacks, settings, URL lists) over plain HTTP.
        log(f"--host {args.host}: make run serves this machine only (debug pages, plain HTTP). To serve others, "
            "use deploy/ (a TLS proxy, a secret key, debug off); to accept debug pages here, set OBS_DEBUG=1")
        return 2
    try:
        proxy_flags()
    except ValueError as e:
        log(str(e))
        return 2

    sup = Supervisor()
    stop_requested: list[int] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, _frame: stop_requested.append(signum))
    try:
        env = dict(os.environ)
        env["REDIS_URL"] = find_or_start_redis(sup)
        run_id = choose_run_id(args.run)
        site = start_stack(sup, env, args.host, args.port, run_id, args.config)
        problem = wait_front_door(sup, site)
        if problem:
            log(f"the site at {site} cannot take a browser's form: {problem}")
            sup.stop()
            return 2
        log(f"dashboard: {site}/runs/{run_id}/   (all runs: {site}/)   Ctrl-C stops everything")
        return sup.watch(stop_requested)  # the push tier restarted when it exits; anything else stops all
    except subprocess.CalledProcessError as e:
        log(f"setup step failed: {e}")
        sup.stop()
        return 1


if __name__ == "__main__":
    sys.exit(main())
