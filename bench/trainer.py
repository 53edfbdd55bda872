"""Trainer benchmark, JSON on stdout: publisher overhead, checkpoint blocking vs writing, restore, sink costs; or
(--first-step) seconds from launching the demo trainer to its first step, with cold and then warm caches under var/."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import ROOT, parser, report


def _steps_per_block(trainer, sink, n: int) -> float:
    """Seconds per step for n steps through `sink` (the real dispatch/complete path of the loop)."""
    trainer.sink = sink
    pending = trainer._dispatch()
    t0 = time.perf_counter()
    for _ in range(n):
        nxt = trainer._dispatch()
        trainer._complete(pending)
        pending = nxt
    trainer._complete(pending)
    return (time.perf_counter() - t0) / n


def _interleaved(trainer, sinks: dict, blocks: int, block_steps: int) -> dict:
    """Median seconds per step of each arm; the arm order rotates every round so none always goes first."""
    times = {k: [] for k in sinks}
    names = list(sinks)
    for i in range(blocks):
        for name in names[i % len(names):] + names[:i % len(names)]:
            times[name].append(_steps_per_block(trainer, sinks[name], block_steps))
    return {name: statistics.median(ts) for name, ts in times.items()}


def _compare(t: dict, base_a: str, base_b: str, other: str) -> dict:
    """`other` against the mean of two identical baseline arms; their gap is the noise floor (A/A test)."""
    base = (t[base_a] + t[base_b]) / 2
    return {"baseline_step_s": base, "step_s": t[other], "overhead_pct": 100 * (t[other] - base) / base,
            "noise_floor_pct": 100 * abs(t[base_a] - t[base_b]) / base}


def corpus_load_s(repeats: int = 3) -> dict:
    """Seconds to read the default domains and build the sampler (what every trainer start pays)."""
    from training.config import DataSection
    from training.sampler import build_sampler

    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        build_sampler(DataSection(), seq_len=128, batch_size=4, seed=0, token_budget=10**8)
        times.append(time.perf_counter() - t0)
    return {"first_s": times[0], "median_s": statistics.median(times)}


# ---------------------------------------------------------------------------------------------- --first-step
def _records(path: Path) -> list[dict]:
    out = []
    if path.exists():
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
    return out


def one_start(config: Path, work: Path, i: int, run_id: str, fresh: bool, code: Path = ROOT) -> dict:
    jsonl = work / f"start{i}.jsonl"
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}  # run.compile_cache decides
    env["PYTHONPATH"] = str(code)
    cmd = [sys.executable, "-m", "training", "run", "--config", str(config), "--run-id", run_id,
           "--no-redis", "--metrics-jsonl", str(jsonl), *(["--fresh"] if fresh else [])]
    t0, r0 = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(work / f"start{i}.log", "w") as log:
        proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        while proc.poll() is None and not any(r["kind"] == "metrics" for r in _records(jsonl)):
            time.sleep(0.05)
        first = time.monotonic() - t0
        if proc.poll() is not None:
            raise SystemExit(f"the trainer exited {proc.returncode} before its first step; see {work}/start{i}.log")
        proc.send_signal(signal.SIGTERM)
        proc.wait(300)
    finally:
        if proc.poll() is None:
            proc.kill()
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)  # the whole start, its stop (a checkpoint) included
    recs = _records(jsonl)
    t = {r["state"]: r["t"] for r in reversed(recs) if r["kind"] == "state"}  # each state's first time
    compiled = next(r["payload"]["seconds"] for r in recs if r["kind"] == "event" and r["name"] == "compiled")
    manifest = next((r["manifest"] for r in recs if r["kind"] == "manifest"), {})
    cc = next((r["payload"].get("compile_cache") for r in recs if r["kind"] == "event" and r["name"] == "compiled"),
              None)
    return {"first_step_s": round(first, 1), "setup_s": round(t["compiling"] - t["starting"], 1),
            "compile_s": round(compiled, 1), "data_load_s": round(manifest.get("load_seconds") or 0, 1),
            "data_cache": manifest.get("data_cache"), "compile_cache": cc,
            "cpu_s_until_stopped": round(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime, 1)}


STARTS = (("cold_new", "first-step-a", True), ("warm_resumed", "first-step-a", False),
          ("warm_new", "first-step-b", True))


def first_step(args) -> int:
    """--first-step: STARTS[:--starts] of this tree (and of --compare's, interleaved)."""
    load0 = os.getloadavg()[0]
    config = Path(args.config).resolve()
    trees = {"this": ROOT, **({"compare": args.compare.resolve()} if args.compare else {})}
    out: dict = {name: {} for name in trees}
    with tempfile.TemporaryDirectory(prefix="first-step-") as tmp:
        for i, (start, run_id, fresh) in enumerate(STARTS[:args.starts]):
            for name, code in trees.items():
                work = Path(tmp) / name
                work.mkdir(exist_ok=True)
                out[name][start] = one_start(config, work, i, run_id, fresh, code)
    if args.compare:
        out["ratio_first_step_compare_over_this"] = {
            s: round(out["compare"][s]["first_step_s"] / out["this"][s]["first_step_s"], 2) for s in out["this"]}
    return report("first_step", {"config": str(args.config), **(out if args.compare else out["this"]),
                                 "trees": {k: str(v) for k, v in trees.items()},
                                 "loadavg_1m": {"start": round(load0, 2), "end": round(os.getloadavg()[0], 2)}},
                  args.json, not args.no_save)


def main(argv=None) -> int:
    ap = parser(__doc__, "trainer", "first_step")
    ap.add_argument("--config", default=str(ROOT / "training/configs/demo.toml"))
    ap.add_argument("--blocks", type=int, default=8)
    ap.add_argument("--block-steps", type=int, default=25)
    ap.add_argument("--saves", type=int, default=4)
    ap.add_argument("--redis-url", default=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
    ap.add_argument("--first-step", action="store_true", help="time the trainer's starts to their first step instead")
    ap.add_argument("--compare", type=Path, help="--first-step: another source tree, measured interleaved")
    ap.add_argument("--starts", type=int, choices=(1, 2, 3), default=3, help="--first-step: only the first N starts")
    ns = ap.parse_args(argv)
    if ns.first_step:
        return first_step(ns)

    import jax
    import redis as redis_lib

    from observatory import contract
    from training.cli import build_trainer
    from training.config import load
    from training.redis_sink import RedisSink
    from training.sinks import CompositeSink, JsonlSink, WandbSink

    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(message)s")
    logging.getLogger("training").setLevel(logging.INFO)
    out: dict = {"config": ns.config, "corpus_load_s": corpus_load_s()}
    tmp = Path(tempfile.mkdtemp(prefix="bench-trainer-"))
    cfg = load(ns.config)
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, eval_every=0),
                              checkpoint=dataclasses.replace(cfg.checkpoint, dir=str(tmp / "ckpt"), every_steps=0,
                                                             every_minutes=0.0))
    run_id = f"bench-{int(time.time())}"
    trainer = build_trainer(cfg, run_id, redis_url=None)
    from training.compile_cache import CacheCounter

    trainer.compile_cache = CacheCounter().start()  # as Trainer.run() sets it up before _setup and _compile
    trainer._setup()
    trainer._compile()
    trainer.compile_cache.stop()
    out.update({"run_id": run_id, "devices": str(jax.devices()), "tokens_per_step": trainer.tokens_per_step,
                "cpu_count": os.cpu_count(), "load1_at_start": os.getloadavg()[0]})

    redis_sink = RedisSink(ns.redis_url, run_id)
    redis_only = CompositeSink([redis_sink])
    _steps_per_block(trainer, redis_only, 5)  # warm up: connection, first encodes
    t = _interleaved(trainer, {"off_a": CompositeSink([]), "off_b": CompositeSink([]), "redis": redis_only},
                     ns.blocks, ns.block_steps)
    redis_sink.publisher.flush(30)
    st = redis_sink.stats()
    out["publisher_on_vs_off"] = {**_compare(t, "off_a", "off_b", "redis"), "published": st["published"],
                                  "dropped": st["dropped"]}
    last = redis_lib.Redis.from_url(ns.redis_url).xrevrange(contract.telemetry_stream(run_id), count=1)
    if last:
        out["publisher_on_vs_off"]["metrics_per_record"] = len(json.loads(last[0][1][b"data"])["values"])
        out["publisher_on_vs_off"]["bytes_per_record"] = len(last[0][1][b"data"])

    wandb = WandbSink(cfg.sinks.wandb_project, run_id, cfg.to_dict(), dir=str(tmp / "wandb"), mode="offline")
    all_sinks = CompositeSink([redis_sink, JsonlSink(tmp / "metrics.jsonl"), wandb])
    deadline = time.monotonic() + 60
    while wandb.run is None and wandb.errors == 0 and time.monotonic() < deadline:
        time.sleep(0.1)  # measure steady state, not wandb.init
    t = _interleaved(trainer, {"redis_a": redis_only, "redis_b": CompositeSink([redis_sink]), "all": all_sinks},
                     ns.blocks, ns.block_steps)
    c = _compare(t, "redis_a", "redis_b", "all")
    out["all_sinks_vs_redis_only"] = {"steps_per_s_redis_only": 1 / c["baseline_step_s"],
                                      "steps_per_s_all_sinks": 1 / c["step_s"], **c, "wandb": wandb.stats()}

    off = CompositeSink([])
    trainer.sink = off
    saves = []
    for _ in range(ns.saves):
        _steps_per_block(trainer, off, 3)
        info = trainer.save_checkpoint("bench", wait=True)
        saves.append(info)
    size = sum(f.stat().st_size for f in (tmp / "ckpt" / run_id / str(saves[-1]["step"])).rglob("*") if f.is_file())
    t0 = time.perf_counter()
    trainer.restore(saves[-1]["step"])
    jax.block_until_ready(trainer.train_state)
    restore_s = time.perf_counter() - t0
    out["checkpoint"] = {"bytes": size, "blocked_s": [round(s["blocked_s"], 4) for s in saves],
                         "write_total_s": [round(s["write_s"], 4) for s in saves],
                         "blocked_s_median": statistics.median(s["blocked_s"] for s in saves),
                         "write_total_s_median": statistics.median(s["write_s"] for s in saves),
                         "restore_s": restore_s}
    out["load1_at_end"] = os.getloadavg()[0]
    all_sinks.finish()
    trainer.checkpointer.store.close()
    try:
        r = redis_lib.Redis.from_url(ns.redis_url)
        r.delete(contract.telemetry_stream(run_id))
        r.srem(contract.RUNS_KEY, run_id)
    except Exception:
        pass
    shutil.rmtree(tmp, ignore_errors=True)
    return report("trainer", out, ns.json, not ns.no_save)


if __name__ == "__main__":
    sys.exit(main())
