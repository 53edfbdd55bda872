"""Command line: `python -m training run ...` trains; `python -m training control ...` steers a running run.

Exit statuses: run -> 0 stopped cleanly, 1 failed, 2 config error; control -> 0 applied, 1 rejected, 3 timeout.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"

# Positional shorthands: `rollback 120 5` means step=120 skip_batches=5.
_POSITIONAL = {"rollback": ("step", "skip_batches"), "set-lr-multiplier": ("value",),
               "set-token-budget": ("tokens",), "inject-fault": ("fault", "steps")}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m training", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="train (resuming from the run's latest checkpoint)")
    r.add_argument("--config", required=True, help="TOML run config, e.g. training/configs/demo.toml")
    r.add_argument("--steps", type=int, help="stop after this many steps in total (overrides run.steps)")
    r.add_argument("--seed", type=int, help="overrides run.seed")
    r.add_argument("--run-id", help="run id (default: run.name); with the checkpoint dir it picks the resume point")
    r.add_argument("--fresh", action="store_true", help="start over: move old checkpoints aside, publish a rewind")
    r.add_argument("--metrics-jsonl", help="mirror every published record to this JSONL file")
    r.add_argument("--redis-url", default=None, help=f"default: $REDIS_URL or {DEFAULT_REDIS_URL}")
    r.add_argument("--no-redis", action="store_true", help="do not publish to Redis (no command channel either)")
    c = sub.add_parser("control", help="send an operator command to a running run and wait for its ack")
    c.add_argument("run_id")
    c.add_argument("command", help="pause, resume, stop, checkpoint, rollback, set-lr-multiplier, "
                                   "set-token-budget, set-mixture, inject-fault")
    c.add_argument("args", nargs="*", help="key=value pairs (values parsed as JSON when they can be) or "
                                           "positional shorthands, e.g. `rollback 120 5`, `set-mixture a=1 b=2`")
    c.add_argument("--reason", required=True, help="why (kept in the audit trail)")
    c.add_argument("--user", default=os.environ.get("USER", "cli"))
    c.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the applied/rejected ack")
    c.add_argument("--redis-url", default=None)
    return p


def _value(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return text


def command_args(command: str, items: list[str]) -> dict:
    """CLI words to the command's args object."""
    args: dict = {}
    positional = [x for x in items if "=" not in x]
    pairs = dict(x.split("=", 1) for x in items if "=" in x)
    if command == "set-mixture" and "weights" not in pairs:
        return {"weights": {k: _value(v) for k, v in pairs.items()}} if pairs or not positional else \
            {"weights": _value(positional[0])}
    names = _POSITIONAL.get(command, ())
    if len(positional) > len(names):
        raise SystemExit(f"control: too many positional arguments for {command}: {positional}")
    for name, v in zip(names, positional):
        args[name] = _value(v)
    for k, v in pairs.items():
        args[k] = _value(v)
    for k in ("tokens", "steps", "step", "skip_batches"):  # 1e9 on the command line means an integer
        if isinstance(args.get(k), float) and args[k].is_integer():
            args[k] = int(args[k])
    return args


def cmd_run(ns) -> int:
    from training.config import load
    from training.errors import ConfigError

    overrides = {}
    if ns.steps is not None:
        overrides["run.steps"] = ns.steps
    if ns.seed is not None:
        overrides["run.seed"] = ns.seed
    try:
        cfg = load(ns.config, overrides)
    except ConfigError as e:
        print(f"config error: {e.key}: {e.message}".replace("\n", " "), file=sys.stderr)
        return 2
    from observatory import contract

    run_id = ns.run_id or cfg.run.name
    if not contract.RUN_ID_RE.match(run_id):
        print(f"config error: run-id: {run_id!r} must be 1-64 letters, digits or '_.-'", file=sys.stderr)
        return 2
    from training.train import Trainer, install_signal_handlers

    redis_url = None if ns.no_redis else (ns.redis_url or os.environ.get("REDIS_URL") or DEFAULT_REDIS_URL)
    try:
        trainer = Trainer(cfg, run_id, redis_url=redis_url, fresh=ns.fresh, metrics_jsonl=ns.metrics_jsonl,
                          log=lambda m: print(m, flush=True))
    except ConfigError as e:
        print(f"config error: {e.key}: {e.message}".replace("\n", " "), file=sys.stderr)
        return 2
    install_signal_handlers(trainer)
    try:
        return trainer.run()
    except ConfigError as e:
        print(f"config error: {e.key}: {e.message}".replace("\n", " "), file=sys.stderr)
        return 2


def cmd_control(ns) -> int:
    import redis as redis_lib

    from observatory import contract

    url = ns.redis_url or os.environ.get("REDIS_URL") or DEFAULT_REDIS_URL
    args = command_args(ns.command, ns.args)
    try:
        r = redis_lib.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=2, decode_responses=True)
        if not r.sismember(contract.RUNS_KEY, ns.run_id):
            print(f"rejected: unknown run {ns.run_id!r} (not in {contract.RUNS_KEY})")
            return 1
        if not r.exists(contract.heartbeat_key(ns.run_id)):
            print(f"note: run {ns.run_id!r} has no live heartbeat; the command waits in its control stream",
                  file=sys.stderr)
        acks = contract.ack_stream(ns.run_id)
        last = r.xrevrange(acks, count=1)
        cursor = last[0][0] if last else "0-0"
        cmd_id = uuid.uuid4().hex
        r.xadd(contract.control_stream(ns.run_id),
               contract.command_fields(cmd_id, ns.command, args, reason=ns.reason, user=ns.user))
        deadline = time.monotonic() + ns.timeout
        while (left := deadline - time.monotonic()) > 0:
            resp = r.xread({acks: cursor}, count=100, block=max(1, int(min(left, 1.0) * 1000)))
            for _stream, entries in resp or []:
                for eid, f in entries:
                    cursor = eid
                    if f.get("id") != cmd_id:
                        continue
                    step = f" (step {f['step']})" if f.get("step") else ""
                    print(f"{f['status']}: {f.get('detail', '')}{step}", flush=True)
                    if f["status"] == "applied":
                        return 0
                    if f["status"] == "rejected":
                        return 1
    except redis_lib.RedisError as e:
        print(f"error: Redis at {url}: {e}", file=sys.stderr)
        return 3
    print(f"timeout: no applied/rejected ack for {ns.command} ({cmd_id}) within {ns.timeout:g} s")
    return 3


def main(argv: list[str] | None = None) -> int:
    ns = _parser().parse_args(argv)
    return cmd_run(ns) if ns.cmd == "run" else cmd_control(ns)
