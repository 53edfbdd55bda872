"""Chaos: a live demo run through a Redis crash, an ingest kill -9 and a web restart, then nothing may be missing; or
(--outage stop,freeze) the push tier down under a live run."""

from __future__ import annotations

import json
import math
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.request
from contextlib import closing
from pathlib import Path

from harness import (PrivateRedis, Stack, SyntheticTrainer, drained, free_port, listening,  # noqa
                     parser, pct, report, wait_for as wait, web_command)
from viewer_client import LiveViewer  # noqa: E402
from observatory import contract  # noqa: E402

TINY = ["model.d_model=32", "model.n_layers=2", "model.n_heads=2", "model.n_kv_heads=1", "model.d_ff=64",
        "model.seq_len=32", "model.moe.n_routed=4", "model.moe.top_k=2", "model.moe.n_shared=1",
        "train.batch_size=4", 'data.builtin_domains=["python_stdlib", "licenses"]',
        "data.max_bytes_per_domain=200000", "checkpoint.every_steps=0", "checkpoint.every_minutes=0.0",
        "train.eval_every=0", "sinks.heartbeat_s=0.5"]


def jsonl_points(path: Path) -> dict[tuple[str, int], float]:
    out = {}
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        if rec.get("kind") == "metrics":
            for name, v in rec["values"].items():
                out[(name, rec["step"])] = v
        elif rec.get("kind") == "rewind":
            out = {k: v for k, v in out.items() if k[1] <= rec["to_step"]}
    return out


def trainer_step(path: Path) -> int:
    """The newest step in the trainer's JSONL (how far the live run is; its last line may be half written)."""
    steps = [int(m) for m in re.findall(r'"kind":"metrics","t":[^,]+,"step":(\d+)',
                                         path.read_text()[-200_000:])] if path.exists() else []
    return max(steps, default=-1)


def same(a, b) -> bool:
    if a is None or b is None or (isinstance(a, float) and math.isnan(a)):
        return (a is None or math.isnan(a)) and (b is None or math.isnan(b))
    return a == b or abs(a - b) <= 1e-12 * max(abs(a), abs(b))


def db_points(stack: Stack, run_id: str) -> dict[tuple[str, int], float | None]:
    # (run ids here are our own: letters, digits and dashes)
    sql = ("SELECT s.name, p.step, p.value, p.special FROM metrics_point p JOIN metrics_series s ON p.series_id = s.id "
           f"WHERE s.run_id = '{run_id}'")
    special = {1: math.nan, 2: math.inf, 3: -math.inf}
    return {(n, st): (special[sp] if sp else v) for n, st, v, sp in stack.sql(sql)}


def db_last_step(stack: Stack, run_id: str) -> int:
    rows = stack.sql(f"SELECT last_step FROM runs_run WHERE id = '{run_id}'")
    return rows[0][0] if rows and rows[0][0] is not None else -1


def main() -> int:
    ap = parser(__doc__, "chaos", "push_outage")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--db", choices=["sqlite", "postgresql"], default="sqlite")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (logs, JSONL, Redis files)")
    ap.add_argument("--outage", default="", help="instead: the push tier down under a live run, a comma list of "
                    "stop (nginx exits, started again after) and freeze (SIGSTOP, then SIGCONT)")
    ap.add_argument("--outage-seconds", type=float, default=120.0)
    ap.add_argument("--baseline-seconds", type=float, default=20.0, help="the run before the outage (its lag)")
    ap.add_argument("--rate", type=float, default=5.0, help="--outage: synthetic steps per second")
    args = ap.parse_args()
    modes = [m for m in args.outage.split(",") if m]
    if set(modes) - {"stop", "freeze"}:
        ap.error(f"--outage: expected a comma list of stop, freeze (got {args.outage!r})")
    if modes:
        out = {"scenarios": [outage(args, m) for m in modes]}
        out["ok"] = all(s["ok"] for s in out["scenarios"])
        report("push_outage", out, args.json, not args.no_save)
        return 0 if out["ok"] else 1
    import redis

    stack = Stack("chaos")
    work = Path(stack.tmp)
    run_id = f"chaos-{int(time.time())}"
    redis_server, wport = PrivateRedis(work, appendonly=True), free_port()
    redis_url = redis_server.url  # the site stops it after the processes that use it, before the directory goes
    stack.site(redis_server, stack.database(args.db), OBS_DEBUG="1", OBS_LOG_LEVEL="INFO", WANDB_MODE="disabled")
    procs: dict[str, subprocess.Popen] = {}  # by name; children in their own sessions (a kill -9 hits exactly one)
    out: dict = {"run_id": run_id, "steps": args.steps, "db": args.db, "faults": [], "work": str(work)}
    client = redis.Redis(port=redis_server.port)
    ok = False

    def start(name, argv):
        procs[name] = stack.start(argv, log=work / f"{name}.log", start_new_session=True)
        return procs[name]

    def kill(name, sig=signal.SIGKILL):
        if procs[name].poll() is None:
            procs[name].send_signal(sig)
        procs[name].wait(30)

    def up_redis():
        redis_server.start()
        procs["redis"] = redis_server.proc

    def ingest(name):
        return start(name, [sys.executable, "manage.py", "ingest", "--consumer", f"chaos-{name}",
                            "--block-ms", "100", "--lease-ms", "3000"])

    def web():
        start("web", web_command("127.0.0.1", wport, "daphne"))
        wait(lambda: listening(wport), 60, "the web server")

    def reach(step: int) -> int:  # a run that ended before a fault (a fast box) can only reach its last step
        return step if trainer.poll() is None else min(step, trainer_step(jsonl))

    def moved_on(since: int, by: int = 5, timeout: float = 120):
        t0 = time.monotonic()
        wait(lambda: db_last_step(stack, run_id) >= reach(since + by), timeout, f"the database past step {since}")
        return round(time.monotonic() - t0, 2)

    watcher = None
    try:
        up_redis()
        ingest("ingest1")
        ingest("ingest2")
        web()
        jsonl = work / "trainer.jsonl"
        trainer = start("trainer", [
            sys.executable, "-m", "training", "run", "--config", "training/configs/demo.toml", "--run-id", run_id,
            "--steps", str(args.steps), "--metrics-jsonl", str(jsonl), "--redis-url", redis_url,
            "--set", f'checkpoint.dir="{work / "ckpt"}"', *[a for s in TINY for a in ("--set", s)]])
        wait(lambda: db_last_step(stack, run_id) >= 1, 300, "the first stored step (trainer start, compile)")
        watcher = LiveViewer(f"ws://127.0.0.1:{wport}/ws/runs/{run_id}/", metric=contract.M_LOSS)
        watcher.start()

        # 1. Redis: kill -9, restart on its append-only file.
        wait(lambda: trainer_step(jsonl) >= args.steps // 5, 300, "a fifth of the run")
        at, live, mid = db_last_step(stack, run_id), trainer_step(jsonl), trainer.poll() is None
        redis_server.stop(kill=True)
        time.sleep(1.0)  # down for a second: the trainer's publisher buffers, ingest and web retry
        up_redis()
        out["faults"].append({"fault": "redis kill -9 + restart", "db_step": at, "trainer_step": live, "mid_run": mid,
                              "db_moving_again_s": moved_on(db_last_step(stack, run_id), by=1)})

        # 2. kill -9 the ingest holding the run's lease; the other takes over; a supervisor starts a new one.
        wait(lambda: trainer_step(jsonl) >= 2 * args.steps // 5, 300, "40% of the run")
        lease = client.get(f"obs:ingest:lease:{contract.telemetry_stream(run_id)}")
        holder = lease.decode().split(":")[0].removeprefix("chaos-") if lease else "ingest1"
        at, live, mid = db_last_step(stack, run_id), trainer_step(jsonl), trainer.poll() is None
        kill(holder)
        took = moved_on(at, by=1)
        ingest(holder + "b")
        out["faults"].append({"fault": f"kill -9 the lease holder ({holder})", "db_step": at, "trainer_step": live,
                              "mid_run": mid, "db_moving_again_s": took})

        # 3. the web tier: stop, start again; the client reconnects and resumes by itself.
        wait(lambda: trainer_step(jsonl) >= 3 * args.steps // 5, 300, "60% of the run")
        at, connects, live = max(watcher.steps, default=-1), watcher.connects, trainer_step(jsonl)
        mid = trainer.poll() is None
        kill("web", signal.SIGTERM)
        t0 = time.monotonic()
        web()
        wait(lambda: watcher.connects > connects and max(watcher.steps, default=-1) >= reach(at + 6), 120,
             "the WebSocket client to reconnect and see new steps")
        out["faults"].append({"fault": "web restart", "client_step": at, "trainer_step": live, "mid_run": mid,
                              "client_live_again_s": round(time.monotonic() - t0, 2)})

        rc = trainer.wait(600)
        final = max(st for _, st in jsonl_points(jsonl))
        wait(lambda: db_last_step(stack, run_id) >= final, 120, "the database to reach the trainer's last step")
        wait(lambda: max(watcher.steps, default=-1) >= final, 60, "the client to reach the last step")
        stream = client.xrange(contract.telemetry_stream(run_id))
        wait(lambda: drained(client, [run_id]), 60, "the run's stream to be fully acknowledged")

        want, got = jsonl_points(jsonl), db_points(stack, run_id)
        lost = sorted(k for k in want if k not in got)
        extra = sorted(k for k in got if k not in want)
        wrong = sorted(k for k in want if k in got and not same(want[k], got[k]))
        seen, twice = set(), 0
        for _, f in stream:
            if f.get(b"kind") == b"metrics":
                twice += f[b"data"] in seen
                seen.add(f[b"data"])
        db_loss = sorted(st for (n, st) in got if n == contract.M_LOSS)
        ws_loss = sorted(watcher.steps)
        pub = re.findall(rb"publisher: (\d+) published, (\d+) dropped, (\d+) reconnects",
                         (work / "trainer.log").read_bytes())
        alive = {n: p.poll() is None for n, p in procs.items() if n not in ("trainer", "ingest1", "ingest2")}
        alive.update({n: procs[n].poll() is None for n in ("ingest1", "ingest2") if n != holder})
        dead = {k.decode(): int(v) for k, v in client.hgetall(contract.DEADLETTER_COUNT_KEY).items()}
        out.update({
            "trainer_exit": rc, "final_step": final, "points_in_jsonl": len(want), "points_in_db": len(got),
            "lost": len(lost), "lost_sample": lost[:10], "extra": len(extra), "extra_sample": extra[:10],
            "value_mismatches": len(wrong), "stream_entries_twice": twice,
            "publisher": dict(zip(("published", "dropped", "reconnects"), map(int, pub[-1]))) if pub else None,
            "websocket": {"steps": len(ws_loss), "db_steps": len(db_loss), "equal": ws_loss == db_loss,
                          "missing": sorted(set(db_loss) - set(ws_loss))[:20], "live_gaps": watcher.live_gaps,
                          "connects": watcher.connects}, "processes_up": alive, "deadletters": dead})
        ok = (rc == 0 and not lost and not extra and not wrong and not twice and ws_loss == db_loss
              and all(alive.values()) and not dead and (not pub or int(pub[-1][1]) == 0))
    except Exception as e:
        out["error"] = f"{type(e).__name__}: {e}"
        out["logs"] = {n: (work / f"{n}.log").read_bytes()[-1500:].decode("utf-8", "replace") for n in procs
                       if (work / f"{n}.log").exists()}
    finally:
        if watcher is not None:
            watcher.stop.set()
        stack.keep = args.keep or not ok  # the logs, the JSONL and Redis's files stay
        stack.close()
    out["ok"] = ok
    report("chaos", out, args.json, not args.no_save)
    return 0 if ok else 1


# --- the push tier's outage: nginx stopped, or frozen, under a live run -------------------------------------------
def outage(args, mode: str) -> dict:
    """A live run (synthetic trainer, ingest, web, relay, nginx + nchan, a viewer), then nginx stopped (SIGTERM, started
    again after) or frozen (SIGSTOP, SIGCONT) for --outage-seconds; ingest's lag and /healthz sampled every 0.5 s."""
    import psutil
    import redis
    run_id = f"outage-{mode}-{int(time.time())}"
    with Stack(f"chaos-{mode}") as stack:
        work = Path(stack.tmp)
        stack.site(private_redis=True)
        port, (nginx,) = stack.push_tier(wport := free_port(), relay=False)  # first: the web reads its settings
        stack.web(port=wport)
        logs = [work / "ingest.log", work / "relay.log"]
        for name, log in zip(("ingest", "relay"), logs):
            stack.start([sys.executable, "manage.py", name, "--block-ms", "100"], log=log)
        trainer = SyntheticTrainer(stack.redis_url, run_id, args.rate)
        trainer.start() or stack.callback(lambda: trainer.stop.set() or trainer.join(10))

        def stored() -> tuple:  # (the last step stored, points stored) of train/loss
            with closing(sqlite3.connect(work / "bench.sqlite3", timeout=30)) as db:
                return db.execute("SELECT max(p.step), count(*) FROM metrics_point p JOIN metrics_series s ON "
                                  "p.series_id = s.id WHERE s.run_id = ? AND s.name = ?",
                                  (run_id, contract.M_LOSS)).fetchone()
        wait(lambda: (stored()[0] or -1) >= 0, 120, "the run's first stored step")
        viewer = LiveViewer(f"ws://127.0.0.1:{port}/live/runs/{run_id}/lite/", f"http://127.0.0.1:{wport}/api/"
                             f"runs/{run_id}/windows/?points=2000&series={contract.M_LOSS}")
        viewer.start() or stack.callback(viewer.stop.set)
        samples, phase = [], ["before"]

        def sample():  # [phase, ingest's lag in steps, /healthz's ingest_lag, its live_lag]
            while not viewer.stop.wait(0.5):
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{wport}/healthz", timeout=10) as r:
                        health = json.loads(r.read())
                except Exception as e:  # noted, not fatal: /healthz failing is a finding
                    health = {"ingest_lag": f"/healthz: {type(e).__name__}"}
                live = re.sub(r"\d+", "N", str(health.get("live_lag")).replace(run_id, "<run>"))
                samples.append([phase[0], trainer.step - (stored()[0] or -1), health["ingest_lag"], live])
        threading.Thread(target=sample, daemon=True).start()
        time.sleep(args.baseline_seconds)
        phase[0], frozen = "outage", [nginx] + psutil.Process(nginx.pid).children() if mode == "freeze" else []
        for p in frozen:
            p.send_signal(signal.SIGSTOP)
        if mode == "stop":
            nginx.terminate() or nginx.wait(30)
        time.sleep(args.outage_seconds)
        phase[0], t0 = "after", time.monotonic()
        for p in frozen:
            p.send_signal(signal.SIGCONT)
        if mode == "stop":
            stack.start(nginx.args, quiet=False)
        upto = int(redis.Redis.from_url(stack.redis_url).xrevrange(contract.run_key(run_id, "live"), count=1)[0][0]
                   .split(b"-")[0])
        wait(lambda: viewer.seqs and viewer.seqs[-1] >= upto, 300, "the viewer to catch up after the outage")
        back = round(time.monotonic() - t0, 2)
        trainer.stop.set() or trainer.join(10)
        wait(lambda: stored()[0] == trainer.step, 120, "ingest to store the trainer's last step")
        viewer.stop.set() or viewer.join(10)
        step, points = stored()
        lost = [line for p in logs for line in p.read_text().splitlines() if " lost" in line]
    seqs = viewer.seqs
    holes = sorted(set(range(seqs[0], seqs[-1] + 1)) - set(seqs))
    done = {at for at, status in viewer.refetches if status == 200}  # at the number after a hole, or at a gap frame
    fetched = done | {g + 1 for g in viewer.gaps if g in done}
    unfetched = [h for h in holes if min((s for s in seqs if s > h), default=None) not in fetched]
    lag = {ph: [s[1] for s in samples if s[0] == ph] for ph in ("before", "outage", "after")}
    judged = min(len(lag["before"]), len(lag["outage"])) >= 10  # a median of fewer samples is noise
    out = {"mode": mode, "outage_s": args.outage_seconds, "rate": args.rate, "trainer_last_step": trainer.step,
           "stored_last_step": step, "stored_points": points, "all_stored": points == trainer.step + 1,
           "ingest_lag_steps": {ph: {"p50": pct(v, 50) if v else None, "max": max(v, default=None),
                                     "samples": len(v)} for ph, v in lag.items()},
           "ingest_lag_unchanged": pct(lag["outage"], 50) <= pct(lag["before"], 50) + 1 if judged else None,
           "healthz_during_outage": sorted({(s[2], s[3]) for s in samples if s[0] == "outage"}),
           "logged_lost": len(lost), "lost_sample": lost[:5], "viewer_connects": viewer.connects,
           "viewer_entries": len(seqs), "duplicates": len(seqs) - len(set(seqs)), "holes": len(holes),
           "holes_not_refetched": len(unfetched),
           "gap_frames": viewer.gaps, "refetches": viewer.refetches, "caught_up_after_s": back}
    out["ok"] = (out["all_stored"] and out["ingest_lag_unchanged"] is not False and not lost and not out["duplicates"]
                 and not unfetched)
    return out


if __name__ == "__main__":
    sys.exit(main())
