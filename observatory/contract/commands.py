"""Operator commands on the wire: the command schema, its validation, signing, and the command and ack entries.

The trainer, the CLI and the web check commands with this module alone, including the shared rules: a command id
is COMMAND_ID_RULE (COMMAND_ID_RE), a mixture is MIXTURE_RULE (`check_mixture`: relative weights, finite, >= 0, at
least one > 0; the trainer scales them to sum to 1). Entries, replays and signatures: docs/PROTOCOL.md.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import os
import re
import secrets
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

from observatory.contract.messages import SCHEMA_VERSION, SUPPORTED_VERSIONS, _dumps

__all__ = ["ACK_STATUSES", "FAULTS", "STALE_AFTER_S", "MAX_CLOCK_SKEW_S", "DELIVERY_S", "NONCE_MEMORY_S",
           "MAX_FAULT_STEPS", "MAX_COMMAND_ID_LEN",
           "COMMAND_ID_PATTERN", "COMMAND_ID_RE", "COMMAND_ID_RULE", "MIXTURE_RULE", "MixtureError", "check_mixture",
           "CommandError", "ArgSpec", "CommandSpec", "COMMAND_SPECS", "COMMANDS", "Command", "validate_command",
           "parse_command", "command_args_from_words", "check_fresh", "command_fields", "ack_fields",
           "CONTROL_KEY_ENV", "RUN_CONTROL_KEY_ENV", "SIGNED_FIELDS", "load_control_key", "run_control_key",
           "load_run_control_key", "command_signature", "sign_command", "verify_command"]

ACK_STATUSES = ("accepted", "applied", "rejected")
FAULTS = ("lr-spike", "nan", "stall")
MAX_CLOCK_SKEW_S = 30  # how far a sender's clock may run ahead of (or behind) the trainer's
DELIVERY_S = 60  # how long a command may wait on the stream: the trainer's reader reads continuously, from before a
#                  restarted trainer restores its checkpoint and compiles
# A command issued longer ago than this when the trainer reads it is refused (send it again): a sender's clock up to
# MAX_CLOCK_SKEW_S slow, plus the delivery time, and no more: within it, replays are refused by their nonce.
STALE_AFTER_S = 2 * MAX_CLOCK_SKEW_S + DELIVERY_S
# How long the trainer remembers an accepted command's nonce: as long as a copy could still pass check_fresh
# (issued at most MAX_CLOCK_SKEW_S ahead of the trainer's clock, accepted until STALE_AFTER_S after its issue).
NONCE_MEMORY_S = STALE_AFTER_S + MAX_CLOCK_SKEW_S
MAX_FAULT_STEPS = 1000
MAX_COMMAND_ID_LEN = 200
COMMAND_ID_PATTERN = rf"^[A-Za-z0-9_.:-]{{8,{MAX_COMMAND_ID_LEN}}}$"  # JSON Schema / JS
COMMAND_ID_RE = re.compile(COMMAND_ID_PATTERN[:-1] + r"\Z")
COMMAND_ID_RULE = f"8-{MAX_COMMAND_ID_LEN} ASCII letters, digits or '_.:-'"
MIXTURE_RULE = "relative weights: finite numbers >= 0, at least one > 0 (the trainer scales them to sum to 1)"


class CommandError(ValueError):
    """A command that cannot be applied; the message is the reason sent back in the `rejected` ack."""


@dataclass(frozen=True)
class ArgSpec:
    """One argument of a command: its type ("int", "float", "choice", "weights"), range and default."""
    name: str
    type: str
    help: str
    lo: float | None = None
    hi: float | None = None
    default: Any = None  # None: required
    choices: tuple[str, ...] = ()
    only_for: tuple[str, ...] = ()  # inject-fault: arguments that apply to some faults only


@dataclass(frozen=True)
class CommandSpec:
    name: str
    summary: str
    args: tuple[ArgSpec, ...] = ()
    positional: tuple[str, ...] = ()  # CLI words taken in this order before key=value pairs
    destructive: bool = False  # the web asks for a confirmation before sending it


COMMAND_SPECS: dict[str, CommandSpec] = {s.name: s for s in (
    CommandSpec("pause", "Pause training at the next step boundary (heartbeats go on)."),
    CommandSpec("resume", "Resume a paused run."),
    CommandSpec("stop", "Write a checkpoint and end the run.", destructive=True),
    CommandSpec("checkpoint", "Write a checkpoint now and wait until it is on disk."),
    CommandSpec("rollback", "Restore a checkpoint and skip the next batches; later points are superseded.",
                (ArgSpec("step", "int", "checkpoint step to restore", lo=0),
                 ArgSpec("skip_batches", "int", "batches to skip after it", lo=0, default=0)),
                positional=("step", "skip_batches"), destructive=True),
    CommandSpec("set-lr-multiplier", "Multiply the scheduled learning rate from now on.",
                (ArgSpec("value", "float", "multiplier", lo=0.0, hi=1000.0),), positional=("value",)),
    CommandSpec("set-token-budget", "Change the token budget and re-plan the LR decay and the data stages.",
                (ArgSpec("tokens", "int", "new total token budget", lo=1),), positional=("tokens",)),
    CommandSpec("set-mixture", "Change the data mixture weights of the current stage.",
                (ArgSpec("weights", "weights", MIXTURE_RULE, lo=0.0),)),
    CommandSpec("inject-fault", "Inject a fault for testing the observatory (only where the config allows it).",
                (ArgSpec("fault", "choice", "which fault", choices=FAULTS),
                 ArgSpec("steps", "int", "steps it lasts", lo=1, hi=MAX_FAULT_STEPS, default=5),
                 ArgSpec("factor", "float", "LR factor", lo=1.0, hi=1e4, default=100.0, only_for=("lr-spike",)),
                 ArgSpec("seconds", "float", "stall length", lo=0.0, hi=600.0, default=10.0,
                         only_for=("stall",))),
                positional=("fault", "steps")),
)}
COMMANDS = tuple(COMMAND_SPECS)


@dataclass
class Command:
    id: str
    name: str
    args: dict
    reason: str = ""
    user: str = ""
    t: float = 0.0
    nonce: str = ""
    entry_id: str = ""
    refused: str = ""  # set by the reader: refused on arrival, the loop records and acks it (never applied)
    extra: dict = field(default_factory=dict)


def _int(spec: ArgSpec, v: Any) -> int:
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int) or (spec.lo is not None and v < spec.lo) or (
            spec.hi is not None and v > spec.hi):
        raise CommandError(f"{spec.name} must be an integer >= {spec.lo:g}"
                           + (f" and <= {spec.hi:g}" if spec.hi is not None else "") + f", got {v!r}")
    return v


def _float(spec: ArgSpec, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not (
            spec.lo <= v <= spec.hi):
        raise CommandError(f"{spec.name} must be a number in [{spec.lo:g}, {spec.hi:g}], got {v!r}")
    return float(v)


def _weights(spec: ArgSpec, w: Any) -> dict[str, float]:
    return check_mixture(w)


class MixtureError(CommandError):
    """A mixture that breaks MIXTURE_RULE; `domain` names the bad weight (None: the table as a whole)."""

    def __init__(self, message: str, domain: str | None = None):
        super().__init__(message)
        self.domain = domain


def check_mixture(w: Any) -> dict[str, float]:
    """MIXTURE_RULE: the weights as floats (not scaled), or MixtureError saying which weight breaks it."""
    if not isinstance(w, dict) or not w:
        raise MixtureError("weights must be a non-empty object of domain -> weight")
    for k, v in w.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise MixtureError(f"weight of {k!r} must be a finite number >= 0, got {v!r}", str(k))
    total = sum(w.values())
    if total <= 0:
        raise MixtureError("at least one weight must be > 0")
    if not math.isfinite(total):
        raise MixtureError("the weights' sum must be finite (they are relative: scale them down)")
    return {str(k): float(v) for k, v in w.items()}


def _choice(spec: ArgSpec, v: Any) -> str:
    if v not in spec.choices:
        raise CommandError(f"{spec.name} must be one of {', '.join(spec.choices)}, got {v!r}")
    return v


_CHECK = {"int": _int, "float": _float, "weights": _weights, "choice": _choice}


def validate_command(name: str, args: Any) -> dict:
    """Types and ranges of a command's arguments, defaults filled in; CommandError says what is wrong."""
    spec = COMMAND_SPECS.get(name)
    if spec is None:
        raise CommandError(f"unknown command {name!r} (known: {', '.join(COMMANDS)})")
    if not isinstance(args, dict):
        raise CommandError("args must be a JSON object")
    allowed = {a.name for a in spec.args}
    extra = set(args) - allowed
    if extra:
        raise CommandError(f"unexpected argument(s) {', '.join(sorted(extra))} for {name} "
                           f"(allowed: {', '.join(sorted(allowed)) or 'none'})")
    out: dict = {}
    for a in spec.args:
        if a.only_for and out.get("fault") not in a.only_for:
            continue
        if a.name not in args:
            if a.default is None:
                raise CommandError(f"missing argument {a.name!r}")
            out[a.name] = a.default
            continue
        out[a.name] = _CHECK[a.type](a, args[a.name])
    return out


def _str(x: Any) -> str:
    return x.decode("utf-8", "replace") if isinstance(x, bytes) else x


def parse_command(fields: Mapping[Any, Any]) -> Command:
    """A control-stream entry (bytes or str) to a validated Command; CommandError says what is wrong."""
    f = {_str(k): _str(v) for k, v in fields.items()}
    cmd_id = f.get("id", "")
    if not COMMAND_ID_RE.match(cmd_id):
        raise CommandError(f"missing or bad command id: it must be {COMMAND_ID_RULE}")
    if f.get("v") not in SUPPORTED_VERSIONS:
        raise CommandError(f"unsupported schema version {f.get('v')!r}")
    try:
        args = json.loads(f.get("args") or "{}")
    except (ValueError, RecursionError) as e:
        raise CommandError(f"args is not JSON: {str(e)[:100]}") from None
    try:
        t = float(f.get("t") or "nan")
    except ValueError:
        t = math.nan
    if not math.isfinite(t):
        raise CommandError("missing or bad issue time (t): send commands built by contract.command_fields")
    if not f.get("nonce"):
        raise CommandError("missing nonce: send commands built by contract.command_fields")
    name = f.get("command", "")
    return Command(id=cmd_id, name=name, args=validate_command(name, args), reason=f.get("reason", ""),
                   user=f.get("user", ""), t=t, nonce=f["nonce"])


def check_fresh(t: float, now: float) -> None:
    """CommandError unless issue time `t` lies within [now - STALE_AFTER_S, now + MAX_CLOCK_SKEW_S]."""
    if now - t > STALE_AFTER_S:
        raise CommandError(f"stale: issued {now - t:.0f} s ago (more than {STALE_AFTER_S} s); "
                           "send it again with a new id")
    if t - now > MAX_CLOCK_SKEW_S:
        raise CommandError(f"issued {t - now:.0f} s in the future (more than the {MAX_CLOCK_SKEW_S} s of clock skew "
                           "allowed): check the sender's clock, then send it again with a new id")


def _word(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def command_args_from_words(name: str, words: list[str]) -> dict:
    """Command-line words (`600 5`, `value=0.5`, `web=0.7 code=0.3`) to the command's args object."""
    spec = COMMAND_SPECS.get(name)
    if spec is None:
        raise CommandError(f"unknown command {name!r} (known: {', '.join(COMMANDS)})")
    positional = [w for w in words if "=" not in w]
    pairs = dict(w.split("=", 1) for w in words if "=" in w)
    if name == "set-mixture" and "weights" not in pairs:
        if positional and not pairs:
            return {"weights": _word(positional[0])}
        return {"weights": {k: _word(v) for k, v in pairs.items()}}
    if len(positional) > len(spec.positional):
        raise CommandError(f"too many positional arguments for {name}: {positional}")
    args = {k: _word(v) for k, v in zip(spec.positional, positional)}
    args.update({k: _word(v) for k, v in pairs.items()})
    ints = {a.name for a in spec.args if a.type == "int"}
    for k in ints & set(args):  # 1e9 on the command line means an integer
        if isinstance(args[k], float) and args[k].is_integer():
            args[k] = int(args[k])
    return args


CONTROL_KEY_ENV = "OBS_CONTROL_KEY"  # the master key: only the web tier needs it (run keys derive from it)
RUN_CONTROL_KEY_ENV = "OBS_RUN_CONTROL_KEY"  # one run's key, for that run's trainer and its operators' CLI
SIGNED_FIELDS = ("v", "id", "command", "args", "reason", "user", "t", "nonce")


def load_control_key(environ: Mapping[str, str] | None = None, name: str = CONTROL_KEY_ENV) -> bytes | None:
    """The master key: OBS_CONTROL_KEY, or the contents of the file named by OBS_CONTROL_KEY_FILE; None when neither
    is set (`name`: another variable read the same way, e.g. RUN_CONTROL_KEY_ENV)."""
    env = os.environ if environ is None else environ
    direct, path = env.get(name), env.get(name + "_FILE")
    if direct and path:
        raise ValueError(f"set {name} or {name}_FILE, not both")
    if path:
        with open(path, "rb") as f:
            key = f.read().strip()
        if len(key) < 16:
            raise ValueError(f"{name}_FILE={path!r} holds a key shorter than 16 bytes")
        return key
    if direct:
        if len(direct) < 16:
            raise ValueError(f"{name} is shorter than 16 characters")
        return direct.encode()
    return None


def run_control_key(master: bytes, run_id: str, generation: int = 0) -> bytes:
    """Run `run_id`'s control key, derived from the master key only the web tier holds (64 hex characters of
    HMAC-SHA256(master, "observatory control key", run id, generation)): a key signs for its own run only, and
    rotating one run's key is a new generation of that run alone."""
    msg = "".join(f"{len(x)}:{x}" for x in ("observatory control key", run_id, str(int(generation))))
    return hmac.new(master, msg.encode(), hashlib.sha256).hexdigest().encode()


def load_run_control_key(run_id: str, environ: Mapping[str, str] | None = None) -> bytes | None:
    """The key a trainer or the CLI signs and verifies `run_id`'s commands with: OBS_RUN_CONTROL_KEY (or _FILE),
    that run's key as `manage.py control_key <run>` printed it; else derived (generation 0) from the master in
    OBS_CONTROL_KEY (or _FILE) where this host holds it (`make run` on one machine, the tests); None if neither."""
    own = load_control_key(environ, RUN_CONTROL_KEY_ENV)
    if own is not None:
        return own
    master = load_control_key(environ)
    return run_control_key(master, run_id) if master is not None else None


def command_signature(run_id: str, fields: Mapping[Any, Any], key: bytes) -> str:
    f = {_str(k): _str(v) for k, v in fields.items()}
    # Length-prefixed parts: no choice of field values can make two different commands sign alike.
    msg = "".join(f"{len(x)}:{x}" for x in (run_id, *(f.get(k, "") for k in SIGNED_FIELDS)))
    return hmac.new(key, msg.encode(), hashlib.sha256).hexdigest()


def sign_command(run_id: str, fields: dict[str, str], key: bytes) -> dict[str, str]:
    return {**fields, "sig": command_signature(run_id, fields, key)}


def verify_command(run_id: str, fields: Mapping[Any, Any], key: bytes | None) -> None:
    """CommandError unless `fields` carry a valid signature for this run under `key`."""
    if key is None:
        raise CommandError(f"this trainer has no control key ({CONTROL_KEY_ENV} or {CONTROL_KEY_ENV}_FILE), "
                           "so it accepts no commands")
    sig = next((_str(v) for k, v in fields.items() if _str(k) == "sig"), "")
    if not sig:
        raise CommandError("unsigned command: sign it with the run's control key")
    if not hmac.compare_digest(sig, command_signature(run_id, fields, key)):
        raise CommandError(f"bad signature: not signed with run {run_id}'s control key (a key of another run, or "
                           "one replaced by a rotation, signs nothing here)")


def command_fields(cmd_id: str, command: str, args: Mapping[str, Any] | None = None, reason: str = "",
                   user: str = "") -> dict[str, str]:
    """One entry on control_stream(run), issued now with a fresh nonce (sign it with `sign_command`)."""
    return {"v": SCHEMA_VERSION, "id": cmd_id, "command": command, "args": _dumps(dict(args or {})),
            "reason": reason, "user": user, "t": repr(time.time()), "nonce": secrets.token_hex(16)}


def ack_fields(cmd_id: str, status: str, detail: str = "", step: int | None = None,
               entry: str = "") -> dict[str, str]:
    """One entry on ack_stream(run). `entry`: the control-stream entry id it answers, so that a reader matches acks
    to sends by the control stream's order (ack-stream ids are another stream's: they may equal a send's id)."""
    if status not in ACK_STATUSES:
        raise ValueError(f"ack status {status!r} not in {ACK_STATUSES}")
    return {"v": SCHEMA_VERSION, "id": cmd_id, "status": status, "detail": detail,
            "step": "" if step is None else str(int(step)), "t": repr(time.time()), "entry": entry}
