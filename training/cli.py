"""Command line: `python -m training run ...` trains; `python -m training control ...` steers a running run;
`python -m training list-checkpoints RUN` shows what a rollback can go back to; `python -m training ladder
--config LADDER.toml` runs a scaling ladder and pre-registers a forecast (training/ladder_run.py).

Exit statuses: run -> 0 stopped cleanly, 1 failed, 2 config error; control -> 0 applied, 1 rejected, 3 no ack;
list-checkpoints -> 0 listed, 1 no list published for that run, 3 Redis unreachable; data prepare -> 0 written,
2 config error;
ladder -> 0 registered, 1 a rung or the fit failed, 2 config error, 130 interrupted (rerun to continue).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import signal
import sys
import time
import uuid

from observatory import contract
from training.config import RunConfig, load, parse_override
from training.errors import CommandError, ConfigError, Interrupted

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"

log = logging.getLogger("training")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m training", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="train (resuming from the run's latest checkpoint)")
    r.add_argument("--config", required=True, help="TOML run config, e.g. training/configs/demo.toml")
    r.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override one config value (a TOML value, e.g. train.lr=3e-4); repeatable")
    r.add_argument("--steps", type=int, help="stop after this many steps in total (overrides run.steps)")
    r.add_argument("--seed", type=int, help="overrides run.seed")
    r.add_argument("--run-id", help="run id (default: run.name); with the checkpoint dir it picks the resume point")
    r.add_argument("--fresh", action="store_true", help="start over: move old checkpoints aside, publish a rewind")
    r.add_argument("--metrics-jsonl", help="mirror every published record to this JSONL file")
    r.add_argument("--redis-url", default=None, help=f"default: $REDIS_URL or {DEFAULT_REDIS_URL}")
    r.add_argument("--no-redis", action="store_true", help="do not publish to Redis (no command channel either)")
    c = sub.add_parser("control", help="send an operator command to a running run and wait for its ack")
    c.add_argument("run_id")
    c.add_argument("command", help=", ".join(contract.COMMANDS))
    c.add_argument("args", nargs="*", help="key=value pairs (values parsed as JSON when they can be) or "
                                           "positional shorthands, e.g. `rollback 120 5`, `set-mixture a=1 b=2`")
    c.add_argument("--reason", required=True, help="why (kept in the audit trail)")
    c.add_argument("--user", default=os.environ.get("USER", "cli"))
    c.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the applied/rejected ack")
    c.add_argument("--redis-url", default=None)
    c.add_argument("--id", dest="cmd_id", default=None,
                   help="command id; reuse it to retry safely (a command id is never applied twice). An id the "
                        "trainer rejected, or a rollback or restart undid, is refused: send it again without --id "
                        "(a fresh id)")
    lad = sub.add_parser("ladder", help="run a scaling ladder's rungs, fit, and pre-register the target's forecast")
    lad.add_argument("--config", required=True, help="ladder TOML, e.g. training/configs/ladder.toml")
    lad.add_argument("--refit", action="store_true", help="fit and register again even if a registration exists")
    lad.add_argument("--with-target", action="store_true",
                     help="then train the target too (same progress line) and report its final loss vs the forecast")
    lad.add_argument("--redis-url", default=None, help="passed to every rung's trainer")
    lad.add_argument("--no-redis", action="store_true", help="rungs do not publish to Redis")
    dp = sub.add_parser("data", help="data tools (`data prepare`: the sources as tokenized, shuffled shards)")
    dsub = dp.add_subparsers(dest="data_cmd", required=True)
    pp = dsub.add_parser("prepare", help="tokenize the config's domains into shuffled shards + index.json "
                                         "(train from them with --set data.prepared=DIR)")
    pp.add_argument("--config", required=True, help="TOML run config, e.g. training/configs/demo.toml")
    pp.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                    help="override one config value, as for `run`; repeatable")
    pp.add_argument("--out", help="output directory (default: data.prepared, else var/data/<run.name>)")
    pp.add_argument("--shard-tokens", type=int, default=1 << 20, help="token ids per shard file (default 1Mi)")
    pp.add_argument("--shuffle-seed", type=int, default=0, help="seed of the document order in the shards")
    lc = sub.add_parser("list-checkpoints", help="the run's checkpoints (as its trainer last published them)")
    lc.add_argument("run_id")
    lc.add_argument("--redis-url", default=None)
    lc.add_argument("--json", action="store_true", help="print the published JSON as it is")
    return p


def configure_logging() -> None:
    """The one output channel: `[run-id] state step=N detail` and acks on stdout, warnings and errors on stderr."""
    out, err = logging.StreamHandler(sys.stdout), logging.StreamHandler(sys.stderr)
    out.addFilter(lambda record: record.levelno < logging.WARNING)
    err.setLevel(logging.WARNING)
    for handler in (out, err):
        handler.setFormatter(logging.Formatter("%(message)s"))
    for name in ("training", "observatory"):
        logger = logging.getLogger(name)
        logger.setLevel(logging.INFO)
        logger.handlers[:] = [out, err]
        logger.propagate = False  # libraries may configure the root logger; print each line once


def control_key(run_id: str) -> bytes | None:
    """Run `run_id`'s control key (contract.load_run_control_key: OBS_RUN_CONTROL_KEY(_FILE), that run's own key,
    else derived from a master in OBS_CONTROL_KEY(_FILE) or `make run`'s var/control.key): commands of this run
    must be signed with it, and it signs for no other run."""
    env = dict(os.environ)
    local = os.path.join(os.environ.get("OBS_DATA_DIR", "var"), "control.key")  # what `make run` created
    if not any(env.get(n) for n in (contract.CONTROL_KEY_ENV, contract.CONTROL_KEY_ENV + "_FILE",
                                    contract.RUN_CONTROL_KEY_ENV, contract.RUN_CONTROL_KEY_ENV + "_FILE")) \
            and os.path.exists(local):
        env[contract.CONTROL_KEY_ENV + "_FILE"] = local
    try:
        key = contract.load_run_control_key(run_id, env)
    except (OSError, ValueError) as e:
        raise ConfigError(contract.RUN_CONTROL_KEY_ENV, str(e)) from None
    if key is None:
        log.warning("no control key (%s or %s_FILE): this run accepts no operator commands",
                    contract.RUN_CONTROL_KEY_ENV, contract.RUN_CONTROL_KEY_ENV)
    return key


_FROM_CONFIG = object()


def build_trainer(cfg: RunConfig, run_id: str, *, redis_url: str | None, fresh: bool = False,
                  metrics_jsonl: str | None = None, registration=_FROM_CONFIG):
    """The Trainer with the sinks and the command channel its config asks for (redis_url None: neither).
    `registration`: the verified forecast registration (training.experiment), by default loaded and checked
    from the config's experiment.forecast (ConfigError: late, foreign or edited)."""
    # Imported here: `python -m training control` should not pay for importing JAX.
    from training import distributed
    from training.control import ControlChannel
    from training.redis_sink import RedisSink
    from training.sinks import CompositeSink, JsonlSink, WandbSink
    from training.train import Trainer

    if registration is _FROM_CONFIG:
        from training.experiment import load_registration

        registration = load_registration(cfg, run_id, fresh=fresh)
    leader = distributed.is_leader()  # in a multi-process job only process 0 publishes and reads commands
    url = redis_url if cfg.sinks.redis and leader else None
    sinks = [RedisSink(url, run_id)] if url else []
    if (metrics_jsonl or cfg.sinks.jsonl) and leader:
        sinks.append(JsonlSink(metrics_jsonl or cfg.sinks.jsonl))
    if cfg.sinks.wandb != "off" and leader:
        s = cfg.sinks
        sinks.append(WandbSink(s.wandb_project, run_id, cfg.to_dict(), dir=s.wandb_dir, name=cfg.run.name,
                               mode=s.wandb))
    control = ControlChannel(url, run_id, control_key(run_id)) if url else None
    return Trainer(cfg, run_id, CompositeSink(sinks), control=control, fresh=fresh, registration=registration)


def install_signal_handlers(trainer) -> None:
    """SIGINT/SIGTERM: checkpoint at the next step boundary and exit 0; a signal 3 s later exits at once. Before
    the first step (starting, compiling) there is nothing new to checkpoint: it stops there and then (Interrupted,
    raised in the main thread once the call in progress, e.g. the XLA compile, returns)."""
    first: list[float] = []

    def handler(signum, frame):
        # Ctrl-C under a supervisor arrives twice (terminal + supervisor): only a later signal means "now".
        if first and time.monotonic() - first[0] > 3:
            os._exit(130)
        if not first:
            first.append(time.monotonic())
            why = f"signal {signal.Signals(signum).name}"
            if trainer.before_first_step():
                raise Interrupted(f"{why} before the first step")
            trainer.request_stop(why)

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)


def cmd_run(ns) -> int:
    configure_logging()
    try:
        overrides = dict(parse_override(text) for text in ns.set)
        if ns.steps is not None:
            overrides["run.steps"] = ns.steps
        if ns.seed is not None:
            overrides["run.seed"] = ns.seed
        cfg = load(ns.config, overrides)
        run_id = cfg.run.name if ns.run_id is None else ns.run_id  # --run-id "" is refused, not the default
        if not contract.RUN_ID_RE.match(run_id):
            raise ConfigError("run-id", f"{run_id!r} must be {contract.RUN_ID_RULE}")
        redis_url = None if ns.no_redis else (ns.redis_url or os.environ.get("REDIS_URL") or DEFAULT_REDIS_URL)
        # Before JAX is imported: a late, foreign or edited forecast is refused at once (exit 2).
        from training.experiment import load_registration

        registration = load_registration(cfg, run_id, fresh=ns.fresh)
        from training import distributed

        distributed.initialize(cfg.distributed)  # before anything touches a device
        trainer = build_trainer(cfg, run_id, redis_url=redis_url, fresh=ns.fresh, metrics_jsonl=ns.metrics_jsonl,
                                registration=registration)
        install_signal_handlers(trainer)
        try:
            return trainer.run()
        except Interrupted as e:  # before run() reached its own handling
            log.info("[%s] stopped: %s", run_id, e)
            return 0
    except ConfigError as e:
        log.error(e.line())
        return 2


def cmd_control(ns) -> int:
    import redis as redis_lib

    from observatory.streams import connect, streams_reply

    configure_logging()
    url = ns.redis_url or os.environ.get("REDIS_URL") or DEFAULT_REDIS_URL
    try:
        args = contract.command_args_from_words(ns.command, ns.args)
        args = contract.validate_command(ns.command, args)  # say what is wrong before sending anything
        if ns.cmd_id is not None and not contract.COMMAND_ID_RE.match(ns.cmd_id):
            raise CommandError(f"--id {ns.cmd_id!r} must be {contract.COMMAND_ID_RULE}")
        key = control_key(ns.run_id)
    except (CommandError, ConfigError) as e:
        log.error("control: %s", e)
        return 1
    if key is None:
        log.error("control: no control key: set %s or %s_FILE to the run's key (manage.py control_key <run>)",
                  contract.RUN_CONTROL_KEY_ENV, contract.RUN_CONTROL_KEY_ENV)
        return 1
    try:
        r = connect(url, timeout=5.0, decode_responses=True)
        if not r.sismember(contract.RUNS_KEY, ns.run_id):
            log.info("rejected: unknown run %r (not in %s)", ns.run_id, contract.RUNS_KEY)
            return 1
        if not r.exists(contract.heartbeat_key(ns.run_id)):
            log.warning("note: run %r has no live heartbeat; the command waits in its control stream", ns.run_id)
        acks = contract.ack_stream(ns.run_id)
        last = r.xrevrange(acks, count=1)
        cursor = last[0][0] if last else "0-0"
        cmd_id = ns.cmd_id or uuid.uuid4().hex
        fields = contract.command_fields(cmd_id, ns.command, args, reason=ns.reason, user=ns.user)
        r.xadd(contract.control_stream(ns.run_id), contract.sign_command(ns.run_id, fields, key))
        deadline = time.monotonic() + ns.timeout
        while (left := deadline - time.monotonic()) > 0:
            resp = r.xread({acks: cursor}, count=100, block=max(1, int(min(left, 1.0) * 1000)))
            for _stream, entries in streams_reply(resp):
                for eid, f in entries:
                    cursor = eid
                    if f.get("id") != cmd_id:
                        continue
                    step = f" (step {f['step']})" if f.get("step") else ""
                    log.info("%s: %s%s", f["status"], f.get("detail", ""), step)
                    if f["status"] in ("applied", "rejected"):
                        return 0 if f["status"] == "applied" else 1
    except redis_lib.RedisError as e:
        log.error("error: Redis at %s: %s", url, e)
        return 3
    log.info("timeout: no applied/rejected ack for %s (%s) within %g s", ns.command, cmd_id, ns.timeout)
    return 3


def cmd_list_checkpoints(ns) -> int:
    import redis as redis_lib

    from observatory.streams import connect

    configure_logging()
    url = ns.redis_url or os.environ.get("REDIS_URL") or DEFAULT_REDIS_URL
    try:
        raw = connect(url, timeout=5.0, decode_responses=True).get(contract.checkpoints_key(ns.run_id))
    except redis_lib.RedisError as e:
        log.error("error: Redis at %s: %s", url, e)
        return 3
    if raw is None:
        log.info("no checkpoint list for run %r (its trainer publishes one once it runs)", ns.run_id)
        return 1
    if ns.json:
        print(raw)
        return 0
    listing = json.loads(raw)
    log.info("%8s  %-11s  %-19s  %9s  %s", "step", "kind", "saved (UTC)", "size", "kept because")
    for c in listing["checkpoints"]:
        saved = dt.datetime.fromtimestamp(c["saved_at"], dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S") \
            if c.get("saved_at") else "?"
        log.info("%8d  %-11s  %-19s  %7.1f MB  %s", c["step"], c["kind"], saved, c["bytes"] / 1e6,
                 c["kept"] or "(goes at the next prune)")
    age = time.time() - listing["t"]
    log.info("%d checkpoint(s), listed %.0f s ago. Roll back with: python -m training control %s rollback STEP "
             "[SKIP] --reason ... (a step between checkpoints restores the nearest earlier one)",
             len(listing["checkpoints"]), age, ns.run_id)
    return 0


def cmd_ladder(ns) -> int:
    from training import ladder_run  # no JAX here: every rung trains in its own `python -m training run`

    configure_logging()
    args = (["--no-redis"] if ns.no_redis else []) + (["--redis-url", ns.redis_url] if ns.redis_url else [])
    return ladder_run.main(ns.config, args, refit=ns.refit, with_target=ns.with_target)


def cmd_data(ns) -> int:
    from training import prepare  # no JAX: tokenizing and writing shards is numpy and HF tokenizers

    return prepare.main(ns)


def main(argv: list[str] | None = None) -> int:
    ns = _parser().parse_args(argv)
    return {"run": cmd_run, "control": cmd_control, "ladder": cmd_ladder,
            "list-checkpoints": cmd_list_checkpoints, "data": cmd_data}[ns.cmd](ns)
