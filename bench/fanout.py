"""Fan-out: how many live viewers of one run the web tier serves, and how late; or (--browser) publish → browser
latency through the real chain, a Chromium on the run's page. Prints one JSON object.
A tier of its own files `fanout` (hub) or `latency` (--browser); with nchan, `push_tier` or `latency_nchan`."""

from __future__ import annotations

import json
import math
import signal
import statistics
import sys
import time
import urllib.request

from harness import (PushTap, Stack, SyntheticTrainer, cpu_s, dashboard_subscription, demo_names, free_port, parser,
                     pct, publish_times, push_tier_missing, report, rss_mb, sawtooth, wait_for, wait_http)

import psutil  # noqa: E402
import redis  # noqa: E402
from pagecost import ws_hook  # noqa: E402
from viewer_client import CViewers, LiveViewer, build, pairs, run_stored, start_viewers, summarize, wpct  # noqa: E402

from observatory import contract  # noqa: E402
from observatory.streams import Publisher  # noqa: E402


def run_bench(args) -> dict:
    run_id = f"fanout-{int(time.time())}"
    trainer = tap = None
    phases: dict[str, dict] = {}
    with Stack("fanout") as stack:
        stack.site(private_redis=True, database_url=args.database_url)
        ports = [free_port() for _ in range(args.replicas)]
        tier_procs, relay_proc = {}, None
        if "nchan" in args.tiers:  # first: ingest and the web publish to its OBS_LIVE_PUSH_URL too
            # every viewer comes from 127.0.0.1: push.conf's sockets-per-address limit lifted to the crowd's size
            nchan_ports, tier_procs["nchan"] = push_replicas(stack, args, ports[0])
            relay_procs = [relay_proc := stack.relay()] + [stack.relay() for _ in range(args.relays - 1)]
        web = tier_procs["hub"] = [stack.web(args.server, wait=False, port=p) for p in ports]
        ingest_proc = stack.ingest()
        if args.publisher == "demo":
            trainer = stack.start([sys.executable, "-m", "training", "run", "--config", "training/configs/demo.toml",
                                   "--run-id", run_id, "--fresh", "--set", f'checkpoint.dir="{stack.tmp}/ckpt"'])
            stack.callback(lambda: trainer.send_signal(signal.SIGINT) or trainer.wait(60))
        else:
            trainer = SyntheticTrainer(stack.redis_url, run_id, args.rate)
            trainer.start()
            stack.callback(lambda: trainer.stop.set() or trainer.join(10))
        for p in ports:
            wait_http(f"http://127.0.0.1:{p}/api/runs/", timeout=60)
        wait_for(lambda: run_stored(f"http://127.0.0.1:{ports[0]}", run_id), 300, "the run in the database")
        if "nchan" in args.tiers:  # viewers after the relay's first publish (push.conf's check asks the web above)
            cursor = redis.Redis.from_url(stack.redis_url).get
            wait_for(lambda: cursor(contract.run_key(run_id, "relay")), 60, "the relay's first publish")
        tap = PushTap(stack.redis_url, run_id)
        tap.start()
        stack.callback(tap.stop.set)
        others = {"ingest": [psutil.Process(ingest_proc.pid)], "redis": [psutil.Process(stack.redis.proc.pid)]}
        if relay_proc is not None:
            others["relay"] = [psutil.Process(p.pid) for p in relay_procs]
        for tier in args.tiers:
            urls = ([f"ws://127.0.0.1:{p}/ws/runs/{run_id}/" for p in ports] if tier == "hub"
                    else [f"ws://127.0.0.1:{p}/live/runs/{run_id}/" + ("lite/" if args.subscribe in ("default", "embed")
                                                                         else "") for p in nchan_ports])
            phases[tier] = phase(args, tier, urls, [psutil.Process(p.pid) for p in tier_procs[tier]], others,
                                 trainer, tap)
        if isinstance(trainer, SyntheticTrainer):
            trainer.stop.set()
            trainer.join(10)
        times = publish_times(stack.redis_url, run_id)
        r = redis.Redis.from_url(stack.redis_url)  # each relay's counters (webapp.live.relay.Relay.report)
        relays = [r.hgetall(k) for k in r.scan_iter(match=f"{contract.PREFIX}:relay:stats:*")]
    tiers = {tier: summarize(args, tier, raw, times, tap) for tier, raw in phases.items()}
    out = {"viewers": args.viewers, "connect_rate": args.ramp, "replicas": args.replicas, "server": args.server,
           "subscribe": args.subscribe, "publisher": args.publisher, "tiers": tiers, "relays": args.relays,
           "push_replicas": args.push_replicas,
           "relay_leases_lost": sum(int(h.get(b"leases_lost", 0)) for h in relays) if relays else None}
    hub, nchan = tiers.get("hub", {}), tiers.get("nchan", {})
    for key in ("cpu_us_per_frame", "user_cpu_us_per_frame"):
        if hub.get(key) and nchan.get(key):
            out[f"nchan_vs_hub_{key.removesuffix('_us_per_frame')}_per_frame"] = round(nchan[key] / hub[key], 3)
    return out


def push_replicas(stack: Stack, args, web_port: int) -> tuple[list[int], list]:
    """(public ports, processes) of the push tier: make run's nginx + nchan, or N sharing channels in nchan's Redis
    mode (deploy/push.conf as compose runs it) on the bench's Redis, db 1 (OBS_LIVE_PUSH_URL: the last one's)."""
    redis_url = stack.redis.url[:-1] + "1" if args.push_replicas > 1 else None
    tiers = [stack.push_tier(web_port, relay=False, conn_limit=args.viewers + 100, redis=redis_url, name=f"push{i}")
             for i in range(args.push_replicas)]
    return [port for port, _ in tiers], [p for _, procs in tiers for p in procs]


def phase(args, tier: str, urls: list[str], ps_server: list, others: dict, trainer, tap) -> dict:
    """One tier's measurement (viewers connect at --connect-rate, settle, --seconds, stop): summarize()'s input."""
    resume = None
    if args.subscribe == "default":
        resume = {"type": "resume", "metrics": dashboard_subscription(demo_names())}
    elif args.subscribe == "embed":  # an embed or a report's chart block (static/js/minichart.js): one series
        resume = {"type": "resume", "metrics": [contract.M_LOSS]}
    nw = args.workers or max(1, min(8, math.ceil(args.viewers / 5000)))  # 5,000 viewers per process by default
    per = [args.viewers // nw + (1 if i < args.viewers % nw else 0) for i in range(nw)]
    t_connect, cpu_ramp = time.time(), cpu_s(ps_server)
    workers = start_viewers(urls, per, args.ramp, tier == "hub", resume)
    try:
        return measure(args, workers, ps_server, others, trainer, tap, t_connect, cpu_ramp)
    finally:
        for w in workers:
            w.kill()


def measure(args, workers: list, ps_server: list, others: dict, trainer, tap, t_connect: float,
            cpu_ramp: float) -> dict:
    for w in workers:
        w.ready()
    connect_s = time.time() - t_connect  # spawn to every viewer connected (or failed)
    cpu_ramp = cpu_s(ps_server) - cpu_ramp  # handshakes, hellos, resumes and backfills (and live frames meanwhile)
    groups = {"server": ps_server, **others, "viewers": [psutil.Process(w.pid) for w in workers]}
    time.sleep(args.settle)  # backfills answered, first live frames flowing
    t_start = end = time.time()
    end += args.seconds
    c0 = {**{k: cpu_s(v) for k, v in groups.items()}, "server_user": cpu_s(ps_server, user_only=True)}
    m0, rss_series = [w.count() for w in workers], []
    while time.time() < end:
        rss_series.append([round(time.time() - t_start, 1), rss_mb(ps_server)])
        time.sleep(min(args.rss_every, max(0.0, end - time.time())))
    wall = time.time() - t_start
    c1 = {**{k: cpu_s(v) for k, v in groups.items()}, "server_user": cpu_s(ps_server, user_only=True)}
    m1 = [w.count() for w in workers]
    messages = sum(b[3] - a[3] for a, b in zip(m0, m1)) if None not in m0 + m1 else None
    rss_series.append([round(time.time() - t_start, 1), rss_mb(ps_server)])
    # Listen on until ingest has pushed the window's last step (it may lag on a busy machine), then `tail` more:
    # delivered counts what the fan-out dropped, the delays count how late it came.
    last_step = trainer.step if isinstance(trainer, SyntheticTrainer) else None
    deadline = time.time() + 30
    while last_step is not None and last_step not in tap.pushed and time.time() < deadline:
        time.sleep(0.1)
    for w in workers:
        w.stop(time.time() + args.tail)
    return {"results": [w.result() for w in workers], "t_start": t_start, "t_end": t_start + args.seconds,
            "wall": wall, "c0": c0, "messages": messages, "c1": c1, "cpu_ramp": cpu_ramp, "connect_s": connect_s,
            "rss": rss_series}


# ---------------------------------------------------------------------------------------------- --browser
# every live message's train/loss steps with its arrival (page clock), and the sockets opened
HOOK = "window.__obsFrames = [];\n" + ws_hook("""
    const now = Date.now();
    try {
      const text = String(ev.data);  // nchan (ws+meta.nchan): its headers, a blank line, then the frame
      const got = JSON.parse('{['.includes(text[0]) ? text : text.slice(text.indexOf('\\n\\n') + 2));
      for (const msg of Array.isArray(got) ? got : [got]) {  // a coalesced batch: several frames
        const s = msg.series && msg.series[%(loss)s];
        if (s) window.__obsFrames.push([now, msg.type, s.steps]);
      }
    } catch (e) {}""", on_open="window.__obsOpen = (window.__obsOpen || 0) + 1;")


SCRAPE_TOKEN = "latency-bench-scrape"  # /metrics answers operators and this token only
PATHS = {"hub": "publish -> Redis -> ingest -> live log -> web hub -> page",
         "nchan": "publish -> Redis -> ingest -> live log -> relay -> nchan -> page"}


def prometheus_means(url: str) -> dict[str, float]:
    """{histogram name: mean in ms} from a Prometheus exposition (its _sum / _count)."""
    try:
        req = urllib.request.Request(url, headers={"Authorization": f"Bearer {SCRAPE_TOKEN}"})
        text = urllib.request.urlopen(req, timeout=5).read().decode()
    except Exception:
        return {}
    sums: dict[str, dict[str, float]] = {"_sum": {}, "_count": {}}
    for line in text.splitlines():
        name = line.split("{")[0].split(" ")[0]
        for end, acc in sums.items():
            if not line.startswith("#") and name.endswith(end):
                acc[name[:-len(end)]] = acc.get(name[:-len(end)], 0.0) + float(line.rsplit(" ", 1)[1])
    return {k: round(1000 * v / sums["_count"][k], 1) for k, v in sums["_sum"].items() if sums["_count"].get(k)}


def measure_latency(stack: Stack, a) -> dict:
    """--browser: publish -> the run's page in a Chromium through --tier, --others viewers watching meanwhile."""
    seconds, rate, width, server, tier, others = a.seconds, a.rate, a.width, a.server, a.tiers[0], a.others
    port = free_port()
    front, crowd, push_tap = port, None, None
    if tier == "nchan":  # the page through nginx + nchan as `make run` has it, the relay feeding it (--tier nchan)
        front, _ = stack.push_tier(port, conn_limit=others + 100)  # the crowd shares 127.0.0.1: limit lifted
    stack.web(server, port=port, wait=False)
    stack.ingest()
    names = demo_names() if width == "full" else [contract.M_LOSS, contract.M_LR]
    run_id = f"bench-{int(time.time())}"
    stack.callback((pub := Publisher(stack.redis_url, run_id)).close)
    sent: dict[int, float] = {}
    pub.publish("run", {"t": time.time(), "name": "latency bench", "config": {}})
    pub.metrics(0, {n: 1.0 for n in names})
    pub.flush()
    (tap := PushTap(stack.redis_url, run_id)).start() or stack.callback(tap.stop.set)
    base = f"http://127.0.0.1:{front}"
    wait_http(f"{base}/api/runs/", 60)
    # a loaded box starts ingest slowly; without the run the page is a 404
    wait_for(lambda: run_stored(base, run_id, None), 120, f"ingest creating run {run_id}")
    if tier == "nchan":
        (push_tap := LiveViewer(f"ws://127.0.0.1:{front}/live/runs/{run_id}/lite/")).start()
        stack.callback(lambda: push_tap.stop.set() or push_tap.join())
        if not push_tap.ready.wait(30):  # open before the first step is published
            raise RuntimeError(f"nchan refused {run_id}'s channel for 30 s: the relay never made it")
    if others:  # --others K: K viewers on the run's live path meanwhile (bench/viewers.c), connected first
        wait_for(lambda: run_stored(base, run_id, 0), 120, "step 0 stored")  # the run exists for push.conf's check
        crowd = CViewers([f"ws://127.0.0.1:{front}/live/runs/{run_id}/lite/" if tier == "nchan" else
                          f"ws://127.0.0.1:{port}/ws/runs/{run_id}/"], others, rate=0, hub=tier == "hub",
                         resume={"type": "resume", "metrics": [contract.M_LOSS]})
        stack.callback(crowd.kill)
        crowd_ready = crowd.ready()
    page = stack.browser().new_page()
    page.add_init_script(HOOK % {"loss": json.dumps(contract.M_LOSS)})
    page.goto(f"{base}/runs/{run_id}/")
    # history loaded, socket open and subscribed: the resume's backfill frame names the series
    page.wait_for_function("() => window.__obsFrames !== undefined && (window.__obsFrames.length > 0"
                           + (" || window.__obsOpen > 0)" if tier == "nchan" else ")"), timeout=30_000)
    n = int(seconds * rate)
    t0 = time.monotonic()
    for step in range(1, n + 1):
        target = t0 + step / rate
        time.sleep(max(0.0, target - time.monotonic()))
        sent[step] = time.time() * 1000.0
        pub.metrics(step, sawtooth(step, names))
    try:  # the last step's arrival; a lost step is reported in steps_received, not waited for forever
        page.wait_for_function(f"() => window.__obsFrames.some((f) => f[2].includes({n}))", timeout=10_000)
    except Exception:
        pass
    frames = page.evaluate("() => window.__obsFrames")
    server_stats = prometheus_means(f"http://127.0.0.1:{port}/metrics")
    crowd_out = crowd.stop(0) or crowd.result() if crowd is not None else None
    arrived = {s: now for now, _typ, steps in reversed(frames) for s in steps}  # each step's first arrival
    lat = [arrived[s] - sent[s] for s in sent if s in arrived]
    tap.stop.set()
    out = {"tier": tier, "path": PATHS[tier], "others": others}
    if tier == "hub":  # publish -> ingest's push; the web server's /metrics histograms: push -> fan-out, publish -> it
        ing = [tap.pushed[s] * 1000.0 - sent[s] for s in sent if s in tap.pushed]
        out.update({"relay_mean_ms": server_stats.get("observatory_live_relay_delay_seconds"),
                    "publish_to_fanout_mean_ms": server_stats.get("observatory_live_push_delay_seconds"),
                    "ingest_p50_ms": round(pct(ing, 50), 1) if ing else None,
                    "ingest_p99_ms": round(pct(ing, 99), 1) if ing else None})
    else:  # publish -> relay -> nchan -> the bench's socket on the page's channel
        push = [push_tap.pushed[s] * 1000.0 - sent[s] for s in sent if s in push_tap.pushed]
        out.update({"push_steps_received": len(push), "push_p50_ms": round(pct(push, 50), 1) if push else None,
                    "push_p99_ms": round(pct(push, 99), 1) if push else None})
    if crowd is not None:  # the others' own delays, and (nchan) each step's first arrival at any of them:
        # publish -> relay -> nchan -> a socket, the push tier's share
        secs = {s: t / 1000.0 for s, t in sent.items()}
        ws = pairs(crowd_out, secs, set(secs))
        first = sorted((f - secs[s]) * 1000 for s, _n, f, _h in crowd_out["steps"] if s in secs)
        out.update({"others_connected": crowd_ready[0], "others_failed": crowd_ready[1],
                    "others_dropped": crowd_out["dropped"], "others_errors": crowd_out["errors"],
                    "others_p50_ms": round(wpct(ws, 50), 1) if ws else None,
                    "others_p99_ms": round(wpct(ws, 99), 1) if ws else None,
                    "first_socket_p50_ms": round(pct(first, 50), 1) if first else None,
                    "first_socket_p99_ms": round(pct(first, 99), 1) if first else None})
        if others - crowd_ready[0] + crowd_out["dropped"] > others // 100:  # a latency without the crowd: no figure
            out["error"] = f"--others {others}: {crowd_ready[0]} connected, {crowd_out['dropped']} of them dropped"
    if tier == "nchan":  # a crashed nginx worker drops every socket it held (the page and push_tap reconnect)
        log = open(f"{stack.tmp}/push/logs/nginx-error.log").read()
        if "exited on signal" in log:
            out["error"] = f"nginx's worker crashed {log.count('exited on signal')}x; {out.get('error', '')}"
    return {**out, "steps_sent": len(sent), "steps_received": len(lat), "rate_per_s": rate, "width": len(names),
            "server": server,
            "p50_ms": round(pct(lat, 50), 1) if lat else None, "p99_ms": round(pct(lat, 99), 1) if lat else None,
            "mean_ms": round(statistics.fmean(lat), 1) if lat else None, "max_ms": round(max(lat), 1) if lat else None}


def main() -> int:
    ap = parser(__doc__, "fanout", "push_tier", "latency", "latency_nchan")
    ap.add_argument("--viewers", type=int, default=100)
    ap.add_argument("--seconds", type=float, default=30.0, help="measured window")
    ap.add_argument("--replicas", type=int, default=1, help="web server processes (viewers round-robin)")
    ap.add_argument("--server", choices=("uvicorn", "daphne"), default="uvicorn")
    ap.add_argument("--subscribe", choices=("default", "all", "embed"), default="default",
                    help="default: the dashboard's default series (a browser); all: no resume, every series; "
                         "embed: one series (train/loss), what an embed or a report chart subscribes")
    ap.add_argument("--publisher", choices=("synthetic", "demo"), default="synthetic")
    ap.add_argument("--rate", type=float, default=5.0, help="synthetic steps per second (the demo's rate)")
    ap.add_argument("--workers", type=int, default=0,
                    help="viewer processes (default: one per 5,000 viewers; at most 8)")
    ap.add_argument("--tier", default="hub", help="comma list of hub, nchan: measured one after the other in one run "
                    "(same publisher, same box); nchan needs nginx-light + libnginx-mod-nchan")
    ap.add_argument("--ramp", "--connect-rate", dest="ramp", type=float, default=250.0,
                    help="new connections per second, in total (0: everyone at once, a reconnect storm)")
    ap.add_argument("--relays", type=int, default=1, help="manage.py relay processes for the push tier (leases)")
    ap.add_argument("--push-replicas", type=int, default=1, help="nginx + nchan servers sharing channels in nchan's "
                    "Redis mode, viewers round-robin over them (1: make run's one, channels in its memory)")
    ap.add_argument("--settle", type=float, default=3.0, help="seconds between the last connect and the window")
    ap.add_argument("--tail", type=float, default=3.0, help="seconds viewers keep listening after the window")
    ap.add_argument("--soak", action="store_true", help="also report the web tier's RSS over time")
    ap.add_argument("--rss-every", type=float, default=10.0)
    ap.add_argument("--database-url", default="", help="default: a throw-away SQLite file")
    ap.add_argument("--browser", action="store_true", help="publish -> browser latency instead (one --tier)")
    ap.add_argument("--width", choices=("full", "2"), default="full", help="--browser: series per step")
    ap.add_argument("--others", type=int, default=0,
                    help="--browser: K other viewers of the run meanwhile (bench/viewers.c; nchan's lite channel, or "
                         "the hub's socket with a one-series resume)")
    args = ap.parse_args()
    args.tiers = [t.strip() for t in args.tier.split(",") if t.strip()]
    if set(args.tiers) - {"hub", "nchan"} or not args.tiers:
        ap.error(f"--tier: expected a comma list of hub, nchan (got {args.tier!r})")
    if args.relays < 1 or args.push_replicas < 1 or args.ramp < 0:
        ap.error("--relays and --push-replicas must be >= 1, --connect-rate >= 0")
    if "nchan" in args.tiers and push_tier_missing():
        ap.error(f"--tier nchan: {push_tier_missing()} (apt-get install -y nginx-light libnginx-mod-nchan)")
    if args.browser:
        if len(args.tiers) != 1:
            ap.error("--browser: one --tier, hub or nchan")
        print(f"measuring publish → browser latency for {args.seconds:.0f}s at {args.rate}/s ...", file=sys.stderr)
        with Stack("latency") as stack:
            stack.site(private_redis=True, OBS_METRICS_TOKEN=SCRAPE_TOKEN)  # a concurrent bench flushes the shared db
            out = {"publish_to_browser": measure_latency(stack, args), "targets": {"p50_ms": 50, "p99_ms": 250}}
        error = out["publish_to_browser"].get("error")  # in the JSON, never filed, and a failing exit
        return report("latency" if args.tiers == ["hub"] else "latency_nchan", out, args.json,
                      not args.no_save and not error) or (2 if error else 0)
    build()  # before any clock starts (cached in var/bench/ by the source's hash)
    if not args.json:
        print(f"fan-out: {args.viewers} viewers, {args.replicas} {args.server} replica(s), {args.seconds:.0f}s",
              file=sys.stderr)
    return report("fanout" if args.tiers == ["hub"] else "push_tier", run_bench(args), args.json, not args.no_save)


if __name__ == "__main__":
    sys.exit(main())
