"""Fan-out: how many live viewers of one run the web tier serves, and how late. Prints one JSON object.

    .venv/bin/python bench/fanout.py --viewers 1000 --seconds 30 --json [--replicas 2] [--server uvicorn]
    .venv/bin/python bench/fanout.py --viewers 1000 --soak --seconds 300 --json      # RSS over time
    .venv/bin/python bench/fanout.py --tier hub,nchan --viewers 3000 --connect-rate 0 --json  # both tiers, a storm

--tier hub,nchan measures each tier in turn in one run, on one publisher: the hub (viewers on the web server's
/ws/runs/<id>/) and the push tier (nginx + nchan as `make run` configures it, fed by `manage.py relay`; viewers on
/live/runs/<id>/lite/, the default dashboard's series, or /live/runs/<id>/ with --subscribe all; no resume).
Per tier: p50_ms, p99_ms, delivered_fraction, connected, server_cpu
(the web replicas, or nginx), cpu_us_per_frame (that CPU per (viewer, step) delivered), connect_cpu_ms (its CPU
while the viewers connected, per viewer), connect_s, viewer_procs_cpu, and ingest's, Redis's and the relay's CPU.

It starts what it needs: a private redis-server, a throw-away SQLite database (or --database-url), `manage.py
ingest`, R web replicas (daphne or uvicorn) and a publisher at the demo trainer's full width: by default a
synthetic one through `observatory.streams.Publisher` with the demo's ~240 series per step at 5 steps/s (the demo
config's names: 4 layers, 16 experts, 4 domains), or with `--publisher demo` the real demo trainer (which needs
a core of its own). Viewers are spread over several processes and round-robin over the replicas: `--client c`
(the default where gcc is) runs bench/viewers.c, thousands of viewers per process (epoll; compiled on first use
into var/bench/), `--client python` bench/fanout_viewers.py (websockets, permessage-deflate offered; the viewers'
CPU limited it past ~3,000). Each opens /ws/runs/<id>/ like a browser (Origin header), reads the hello, then sends
the dashboard's default subscription as a `resume` after the hello's last step (`--subscribe all`: none, i.e.
every series).

delay = a step's arrival at a viewer − its publish time (`data.t` of the metrics entry, same host clock);
delivered = the fraction of (viewer, step) pairs received, for steps published in the measured window (coalesced
frames and backfills count). server_cpu is in cores (1.0 = one core busy) over the window, summed over the web
replicas; server_rss_mb is their total RSS at the end. Ingest, Redis and the viewer processes are reported too.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import psutil  # noqa: E402

import pushpin_tier  # noqa: E402
from fanout_tiers import cpu_s, publish_times, rss_mb, start_push_tier, start_relay, start_viewers, summarize  # noqa: E402
from latency import wait_http  # noqa: E402
from tests.support import PrivateRedis, free_port  # noqa: E402
from viewer_client import build, gcc  # noqa: E402
from observatory import contract  # noqa: E402

sys.path.insert(0, str(ROOT / "deploy"))
from run_local import push_tier_missing, web_command  # noqa: E402

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
    """What a browser with the default dashboard subscribes to (webapp/runs/views.py charts, moe.js's router
    panel on its first layer, the data panel): ~34 of the ~240 series."""
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


def server_cmd(server: str, port: int) -> list[str]:
    """The web server exactly as `make run` starts it (deploy/run_local.py)."""
    return web_command("127.0.0.1", port, server)


def run_bench(args) -> dict:
    tmp = tempfile.mkdtemp(prefix="obs-fanout-")
    procs: list[subprocess.Popen] = []
    spies: list[subprocess.Popen] = []
    redis = PrivateRedis(tmp)
    redis.start()
    redis_proc, redis_url = redis.proc, redis.url
    env = {**os.environ, "REDIS_URL": redis_url, "OBS_DATA_DIR": tmp, "PYTHONUNBUFFERED": "1",
           "DATABASE_URL": args.database_url or f"sqlite:///{tmp}/bench.sqlite3", "OBS_DEBUG": "0",
           "DJANGO_SECRET_KEY": "fanout-bench-" + "x" * 40, "OBS_SSL_REDIRECT": "0", "OBS_LOG_LEVEL": "WARNING"}
    py = sys.executable
    run_id = f"fanout-{int(time.time())}"
    trainer = tap = None
    ports = [free_port() for _ in range(args.replicas)]
    phases: dict[str, dict] = {}
    tier_procs: dict[str, list[subprocess.Popen]] = {}
    try:
        subprocess.run([py, "manage.py", "migrate", "--noinput"], cwd=ROOT, env=env, check=True,
                       stdout=subprocess.DEVNULL)
        nchan_port = pushpin_port = relay_proc = None
        if "nchan" in args.tiers:
            nchan_port, push_procs = start_push_tier(tmp, env, ports[0], relay=False)
            procs += push_procs
            tier_procs["nchan"] = push_procs[:1]
        if "pushpin" in args.tiers:  # the relay publishes through its shim, which tees every frame to nchan
            pushpin_port, pushpin_runner, pushpin_helper = pushpin_tier.start(tmp, env, env.get("OBS_LIVE_PUSH_URL"))
            procs += pushpin_helper
            tier_procs["pushpin"] = pushpin_runner + pushpin_helper  # cpu_s counts their children (condure, zurl, ...)
        if nchan_port or pushpin_port:  # --relays N: N relays sharing the runs by leases (one holds this run)
            relay_procs = [start_relay(env) for _ in range(args.relays)]
            relay_proc = relay_procs[0]
            procs += relay_procs
        procs.append(subprocess.Popen([py, "manage.py", "ingest", "--block-ms", "100"], cwd=ROOT, env=env))
        ingest_proc = procs[-1]
        web = [subprocess.Popen(server_cmd(args.server, p), cwd=ROOT, env=env) for p in ports]
        tier_procs["hub"] = web
        if args.profile:  # py-spy samples each replica until it exits; collapsed stacks in DIR/web-<i>.txt
            spies += [subprocess.Popen([str(Path(sys.executable).parent / "py-spy"), "record", "--pid", str(w.pid), "--format", "raw", "--rate", "50",
                                        "--output", f"{args.profile}/web-{i}.txt"], stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL) for i, w in enumerate(web)]
        procs += web
        if args.publisher == "demo":
            ckpt = Path(tmp) / "ckpt"
            trainer = subprocess.Popen([py, "-m", "training", "run", "--config", "training/configs/demo.toml",
                                        "--run-id", run_id, "--fresh", "--set", f'checkpoint.dir="{ckpt}"'],
                                       cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
        else:
            trainer = SyntheticTrainer(redis_url, run_id, args.rate)
            trainer.start()
        for p in ports:
            wait_http(f"http://127.0.0.1:{p}/api/runs/", timeout=60)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:  # ingest stored the run and some steps
            try:
                import urllib.request
                body = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{ports[0]}/api/runs/{run_id}/",
                                                         timeout=2).read())
                if (body.get("last_step") or -1) >= 0:
                    break
            except Exception:
                pass
            time.sleep(0.5)
        else:
            raise RuntimeError("the run never reached the database")
        tap = PushTap(redis_url, run_id)
        tap.start()
        others = {"ingest": [psutil.Process(ingest_proc.pid)], "redis": [psutil.Process(redis_proc.pid)]}
        if relay_proc is not None:
            others["relay"] = [psutil.Process(p.pid) for p in relay_procs]
        for tier in args.tiers:
            urls = ([f"ws://127.0.0.1:{p}/ws/runs/{run_id}/" for p in ports] if tier == "hub"
                    else [f"ws://127.0.0.1:{nchan_port if tier == 'nchan' else pushpin_port}/live/runs/{run_id}/"
                          + ("lite/" if args.subscribe in ("default", "embed") else "")])
            phases[tier] = phase(args, tier, urls, [psutil.Process(p.pid) for p in tier_procs[tier]], others,
                                 trainer, tap)
    finally:
        if tap is not None:
            tap.stop.set()
        if trainer is not None:
            if isinstance(trainer, SyntheticTrainer):
                trainer.stop.set()
                trainer.join(10)
            else:
                trainer.send_signal(signal.SIGINT)
                try:
                    trainer.wait(60)
                except subprocess.TimeoutExpired:
                    trainer.kill()
        times = publish_times(redis_url, run_id) if redis_proc.poll() is None else {}
        for p in spies:  # py-spy writes its profile on SIGINT
            p.send_signal(signal.SIGINT)
            p.wait(30)
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
        if pushpin_port:  # after the relay and the producers that publish to it
            pushpin_tier.stop(pushpin_runner)
        redis.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    tiers = {tier: summarize(args, tier, raw, times, tap) for tier, raw in phases.items()}
    out = {"viewers": args.viewers, "connect_rate": args.ramp, "replicas": args.replicas, "server": args.server,
           "subscribe": args.subscribe, "publisher": args.publisher, "machine_load1": round(os.getloadavg()[0], 2),
           "tiers": tiers}
    for engine in ("nchan", "pushpin"):
        if "hub" in tiers and engine in tiers and tiers["hub"]["cpu_us_per_frame"] and tiers[engine]["cpu_us_per_frame"]:
            out[f"{engine}_vs_hub_cpu_per_frame"] = round(tiers[engine]["cpu_us_per_frame"] /
                                                          tiers["hub"]["cpu_us_per_frame"], 3)
        if "hub" in tiers and engine in tiers and tiers["hub"].get("user_cpu_us_per_frame") \
                and tiers[engine].get("user_cpu_us_per_frame"):
            out[f"{engine}_vs_hub_user_cpu_per_frame"] = round(tiers[engine]["user_cpu_us_per_frame"] /
                                                               tiers["hub"]["user_cpu_us_per_frame"], 3)
    return out


def phase(args, tier: str, urls: list[str], ps_server: list, others: dict, trainer, tap) -> dict:
    """One tier's measurement: its viewers connect (at --connect-rate), settle, are measured over --seconds, then
    stop. Returns the raw material summarize() turns into the tier's figures."""
    resume = None
    if args.subscribe == "default":
        resume = {"type": "resume", "metrics": dashboard_subscription(demo_names())}
    elif args.subscribe == "embed":  # an embed or a report's chart block (static/js/minichart.js): one series
        resume = {"type": "resume", "metrics": [contract.M_LOSS]}
    per_proc = 5000 if args.client == "c" else 400  # viewers per process by default
    nw = args.workers or max(1, min(8, math.ceil(args.viewers / per_proc)))
    per = [args.viewers // nw + (1 if i < args.viewers % nw else 0) for i in range(nw)]
    t_connect = time.time()
    cpu_ramp = cpu_s(ps_server)
    workers = start_viewers(args.client, urls, per, args.ramp, tier == "hub", resume)
    try:
        return measure(args, workers, ps_server, others, trainer, tap, t_connect, cpu_ramp)
    finally:
        for w in workers:
            w.kill()


def measure(args, workers: list, ps_server: list, others: dict, trainer, tap, t_connect: float,
            cpu_ramp: float) -> dict:
    connected = failed = 0
    for w in workers:
        c, f = w.ready()
        connected, failed = connected + c, failed + f
    connect_s = time.time() - t_connect  # spawn to every viewer connected (or failed)
    cpu_ramp = cpu_s(ps_server) - cpu_ramp  # handshakes, hellos, resumes and backfills (and live frames meanwhile)
    groups = {"server": ps_server, **others, "viewers": [psutil.Process(w.pid) for w in workers]}
    time.sleep(args.settle)  # backfills answered, first live frames flowing
    t_start = time.time()
    c0 = {k: cpu_s(v) for k, v in groups.items()}
    c0["server_user"] = cpu_s(ps_server, user_only=True)
    m0 = [w.count() for w in workers]
    rss_series = []
    end = t_start + args.seconds
    while time.time() < end:
        rss_series.append([round(time.time() - t_start, 1), rss_mb(ps_server)])
        time.sleep(min(args.rss_every, max(0.0, end - time.time())))
    wall = time.time() - t_start
    c1 = {k: cpu_s(v) for k, v in groups.items()}
    c1["server_user"] = cpu_s(ps_server, user_only=True)
    m1 = [w.count() for w in workers]
    messages = sum(b[3] - a[3] for a, b in zip(m0, m1)) if None not in m0 + m1 else None
    rss_series.append([round(time.time() - t_start, 1), rss_mb(ps_server)])
    # Listen on until ingest has pushed the window's last step (it may lag on a busy machine), then `tail` more:
    # delivered counts what the fan-out dropped, the delays count how late it came.
    last_step = trainer.step if isinstance(trainer, SyntheticTrainer) else None
    deadline = time.time() + 30
    while last_step is not None and last_step not in tap.pushed and time.time() < deadline:
        time.sleep(0.1)
    stop_at = time.time() + args.tail
    for w in workers:
        w.stop(stop_at)
    results = [w.result() for w in workers]
    return {"results": results, "t_start": t_start, "t_end": t_start + args.seconds, "wall": wall, "c0": c0,
            "messages": messages,
            "c1": c1, "cpu_ramp": cpu_ramp, "connect_s": connect_s, "rss": rss_series}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--viewers", type=int, default=100)
    ap.add_argument("--seconds", type=float, default=30.0, help="measured window")
    ap.add_argument("--replicas", type=int, default=1, help="web server processes (viewers round-robin)")
    ap.add_argument("--server", choices=("uvicorn", "daphne"), default="uvicorn")
    ap.add_argument("--subscribe", choices=("default", "all", "embed"), default="default",
                    help="default: the dashboard's default series (a browser); all: no resume, every series; "
                         "embed: one series (train/loss), what an embed or a report chart subscribes")
    ap.add_argument("--publisher", choices=("synthetic", "demo"), default="synthetic")
    ap.add_argument("--rate", type=float, default=5.0, help="synthetic steps per second (the demo's rate)")
    ap.add_argument("--client", choices=("c", "python"), default="c" if gcc() else "python",
                    help="viewer processes: bench/viewers.c (built with gcc on first use; the default where gcc is) "
                         "or bench/fanout_viewers.py (Python websockets)")
    ap.add_argument("--workers", type=int, default=0,
                    help="viewer processes (default: one per 5,000 viewers for c, per 400 for python; at most 8)")
    ap.add_argument("--tier", default="hub", help="comma list of hub, nchan: measured one after the other in one run "
                    "(same publisher, same box); nchan needs nginx-light + libnginx-mod-nchan")
    ap.add_argument("--ramp", "--connect-rate", dest="ramp", type=float, default=250.0,
                    help="new connections per second, in total (0: everyone at once, a reconnect storm)")
    ap.add_argument("--relays", type=int, default=1, help="manage.py relay processes for the push tier (leases)")
    ap.add_argument("--settle", type=float, default=3.0, help="seconds between the last connect and the window")
    ap.add_argument("--tail", type=float, default=3.0, help="seconds viewers keep listening after the window")
    ap.add_argument("--soak", action="store_true", help="also report the web tier's RSS over time")
    ap.add_argument("--rss-every", type=float, default=10.0)
    ap.add_argument("--database-url", default="", help="default: a throw-away SQLite file")
    ap.add_argument("--profile", default="", help="directory: py-spy profiles of each web replica (collapsed stacks)")
    ap.add_argument("--json", action="store_true", help="print only the JSON object")
    args = ap.parse_args()
    args.tiers = [t.strip() for t in args.tier.split(",") if t.strip()]
    bad = set(args.tiers) - {"hub", "nchan", "pushpin"}
    if bad or not args.tiers:
        ap.error(f"--tier: expected a comma list of hub, nchan, pushpin (got {args.tier!r})")
    if "pushpin" in args.tiers and pushpin_tier.missing():
        ap.error(f"--tier pushpin: {pushpin_tier.missing()}")
    if args.ramp < 0:
        ap.error("--connect-rate must be >= 0")
    if args.relays < 1:
        ap.error("--relays must be >= 1")
    if "nchan" in args.tiers and push_tier_missing():
        ap.error(f"--tier nchan: {push_tier_missing()} (apt-get install -y nginx-light libnginx-mod-nchan)")
    if args.client == "c":
        build()  # before any clock starts (cached in var/bench/ by the source's hash)
    if not args.json:
        print(f"fan-out: {args.viewers} viewers, {args.replicas} {args.server} replica(s), {args.seconds:.0f}s",
              file=sys.stderr)
    print(json.dumps(run_bench(args), indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
