"""The trainer's run config: typed, frozen dataclasses loaded from a TOML file and validated field by field."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from training.errors import ConfigError


@dataclass(frozen=True)
class RunSection:
    name: str = "demo"  # human name; also the default run id (so re-running continues the same run)
    seed: int = 0  # seeds params init, the data sampler and the step RNG
    steps: int = 0  # stop after this many steps in total (0 = run until the token budget is spent)
    compile_cache: str = "var/jax-cache"  # persistent XLA compilation cache: restarts skip compiling ("" = off)


@dataclass(frozen=True)
class TrainSection:
    batch_size: int = 16  # sequences per step (each model.seq_len + 1 tokens long)
    lr: float = 3e-3  # peak learning rate
    weight_decay: float = 0.1  # decoupled (AdamW) weight decay, not applied to norms or biases
    grad_clip: float = 1.0  # clip the global gradient norm to this (0 = off)
    beta1: float = 0.9  # Adam first-moment decay
    beta2: float = 0.95  # Adam second-moment decay
    eps: float = 1e-8  # Adam epsilon
    token_budget: int = 100_000_000  # planned tokens for the whole run; the LR schedule spans it
    warmup_ratio: float = 0.01  # fraction of the budget spent warming up linearly from 0
    min_lr_ratio: float = 0.05  # final LR as a fraction of the peak
    schedule: str = "linear"  # "linear" (warmup, linear decay) or "wsd" (warmup, stable, decay)
    decay_ratio: float = 0.2  # wsd only: fraction of the budget spent in the final decay
    skip_nonfinite: bool = True  # skip the update (params unchanged) when the loss or gradient is NaN/Inf
    max_nonfinite_steps: int = 25  # fail the run after this many consecutive non-finite steps
    allow_faults: bool = False  # accept the inject-fault command (demo and tests only)
    peak_flops: float = 0.0  # hardware peak FLOP/s for MFU (0 = ask the telemetry module to guess)


@dataclass(frozen=True)
class DataSection:
    builtin_domains: tuple = ("python_stdlib", "docstrings", "licenses", "docs_text")  # offline text domains
    corpora: dict = field(default_factory=dict)  # extra domain -> directory of .txt/.jsonl/.parquet files
    stages: tuple = ("pretrain", "midtrain")  # stage names, in order
    stage_fractions: tuple = (0.8, 0.2)  # fraction of the token budget per stage (sums to 1)
    mixture: dict = field(default_factory=dict)  # stage -> {domain: weight}; empty = training.data's presets
    max_bytes_per_domain: int = 4_000_000  # read cap per domain (keeps start-up to a couple of seconds)
    eval_fraction: float = 0.02  # tail of each domain held out for evaluation
    tokenizer: str = "byte"  # tokenizer kind ("byte": UTF-8 bytes, vocab 256)

    def to_data_config(self):
        """The training.data.DataConfig this section describes."""
        from training import data as data_lib

        stages = None
        if self.mixture or tuple(self.stages) != ("pretrain", "midtrain") or \
                tuple(self.stage_fractions) != (0.8, 0.2):
            domains = list(self.builtin_domains) + sorted(self.corpora)
            presets = {s.name: s.weights for s in data_lib.default_stages(domains)}
            stages = tuple(data_lib.StageConfig(name, float(frac), self.mixture.get(name) or presets.get(
                name, {d: 1.0 for d in domains})) for name, frac in zip(self.stages, self.stage_fractions))
        return data_lib.DataConfig(builtin_domains=tuple(self.builtin_domains), corpora=dict(self.corpora),
                                   max_bytes_per_domain=self.max_bytes_per_domain,
                                   eval_fraction=self.eval_fraction, stages=stages)


@dataclass(frozen=True)
class CheckpointSection:
    dir: str = "var/checkpoints"  # checkpoints live in <dir>/<run id>/
    every_steps: int = 50  # save every this many steps (0 = off)
    every_minutes: float = 1.0  # ... or when this much wall time passed since the last save (0 = off)
    keep_last: int = 3  # keep the newest K checkpoints
    keep_every: int = 1000  # ... and every checkpoint whose step is a multiple of this, forever (0 = none)
    async_save: bool = True  # write in the background; the loop only waits for the device->host copy


@dataclass(frozen=True)
class SinksSection:
    redis: bool = True  # publish to the run's Redis stream (REDIS_URL)
    jsonl: str = ""  # mirror every published record to this JSONL file ("" = off; --metrics-jsonl overrides)
    wandb: str = "off"  # "off", "offline" (nothing leaves the machine) or "online"
    wandb_project: str = "observatory"  # W&B project name
    wandb_dir: str = "var"  # W&B writes <wandb_dir>/wandb/offline-run-*/ (import with manage.py import_wandb)
    heartbeat_s: float = 2.0  # seconds between heartbeats


@dataclass(frozen=True)
class RunConfig:
    run: RunSection = RunSection()  # [run]
    model: Any = None  # [model], a training.model.ModelConfig
    train: TrainSection = TrainSection()  # [train]
    data: DataSection = DataSection()  # [data]
    checkpoint: CheckpointSection = CheckpointSection()  # [checkpoint]
    sinks: SinksSection = SinksSection()  # [sinks]

    def to_dict(self) -> dict:
        """Plain JSON-able dict of every field (defaults included): what the `run` message carries."""
        return _jsonable(dataclasses.asdict(self))

    def fingerprint(self) -> dict:
        """The parts a checkpoint must agree with: the state's shapes and the sampler's meaning depend on them."""
        d = self.to_dict()
        return {"model": d["model"], "data.tokenizer": d["data"]["tokenizer"], "data.stages": d["data"]["stages"],
                "data.domains": list(d["data"]["builtin_domains"]) + sorted(d["data"]["corpora"])}

    def fingerprint_hash(self) -> str:
        blob = json.dumps(self.fingerprint(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def replace(self, **sections) -> "RunConfig":
        return dataclasses.replace(self, **sections)


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    return x


# ---------------------------------------------------------------------------------------------- parsing
def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _section(cls, d: Any, prefix: str, checks: dict):
    if not isinstance(d, dict):
        raise ConfigError(prefix, "must be a table")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for k, v in d.items():
        key = f"{prefix}.{k}"
        if k not in fields:
            raise ConfigError(key, f"unknown key (known: {', '.join(fields)})")
        f = fields[k]
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        if isinstance(default, bool):
            if not isinstance(v, bool):
                raise ConfigError(key, f"must be true or false, got {v!r}")
        elif _is_int(default):
            if not _is_int(v):
                raise ConfigError(key, f"must be an integer, got {v!r}")
        elif isinstance(default, float):
            if not _is_num(v):
                raise ConfigError(key, f"must be a number, got {v!r}")
            v = float(v)
        elif isinstance(default, str):
            if not isinstance(v, str):
                raise ConfigError(key, f"must be a string, got {v!r}")
        elif isinstance(default, tuple):
            if not isinstance(v, list):
                raise ConfigError(key, f"must be a list, got {v!r}")
            v = tuple(v)
        elif isinstance(default, dict):
            if not isinstance(v, dict):
                raise ConfigError(key, f"must be a table, got {v!r}")
        if k in checks:
            ok, message = checks[k](v)
            if not ok:
                raise ConfigError(key, message)
        kwargs[k] = v
    return cls(**kwargs)


def _pos_int(v):
    return v > 0, "must be a positive integer"


def _nonneg_int(v):
    return v >= 0, "must be an integer >= 0"


def _pos(v):
    return v > 0, "must be > 0"


def _nonneg(v):
    return v >= 0, "must be >= 0"


def _ratio(v):
    return 0 <= v <= 1, "must be between 0 and 1"


def _ratio_open(v):
    return 0 <= v < 1, "must be >= 0 and < 1"


_CHECKS = {
    "run": {"name": lambda v: (bool(v) and len(v) <= 64 and all(c.isalnum() or c in "_.-" for c in v)
                               and v[0].isalnum(), "must be 1-64 letters, digits or '_.-', starting alphanumeric"),
            "seed": _nonneg_int, "steps": _nonneg_int},
    "train": {"batch_size": _pos_int, "lr": _pos, "weight_decay": _nonneg, "grad_clip": _nonneg,
              "beta1": _ratio_open, "beta2": _ratio_open, "eps": _pos, "token_budget": _pos_int,
              "warmup_ratio": _ratio_open, "min_lr_ratio": _ratio, "decay_ratio": _ratio,
              "schedule": lambda v: (v in ("linear", "wsd"), f"unknown schedule {v!r} (linear, wsd)"),
              "max_nonfinite_steps": _pos_int, "peak_flops": _nonneg},
    "checkpoint": {"dir": lambda v: (bool(v), "must not be empty"), "every_steps": _nonneg_int,
                   "every_minutes": _nonneg, "keep_last": _pos_int, "keep_every": _nonneg_int},
    "sinks": {"wandb": lambda v: (v in ("off", "offline", "online"), "must be off, offline or online"),
              "heartbeat_s": _pos},
    "data": {"stages": lambda v: (len(v) >= 1 and all(isinstance(s, str) and s for s in v)
                                  and len(set(v)) == len(v), "must be a list of distinct stage names"),
             "stage_fractions": lambda v: (len(v) >= 1 and all(_is_num(x) and x > 0 for x in v)
                                           and abs(sum(v) - 1) < 1e-6, "must be positive numbers summing to 1"),
             "builtin_domains": lambda v: (all(isinstance(x, str) for x in v) and len(set(v)) == len(v),
                                           "must be a list of distinct domain names"),
             "max_bytes_per_domain": lambda v: (v >= 1024, "must be at least 1024"),
             "eval_fraction": lambda v: (0 <= v < 0.5, "must be >= 0 and < 0.5")},
}


def _check_data(data: DataSection) -> DataSection:
    if len(data.stage_fractions) != len(data.stages):
        raise ConfigError("data.stage_fractions", f"needs one fraction per stage ({len(data.stages)})")
    mixture = {}
    for stage, weights in data.mixture.items():
        key = f"data.mixture.{stage}"
        if stage not in data.stages:
            raise ConfigError(key, f"unknown stage (stages: {', '.join(data.stages)})")
        if not isinstance(weights, dict) or not weights:
            raise ConfigError(key, "must be a table of domain = weight")
        for dom, w in weights.items():
            if not _is_num(w) or w < 0:
                raise ConfigError(f"{key}.{dom}", f"must be a number >= 0, got {w!r}")
        if sum(weights.values()) <= 0:
            raise ConfigError(key, "weights must not all be zero")
        mixture[stage] = {dom: float(w) for dom, w in weights.items()}
    for dom, path in data.corpora.items():
        if not isinstance(path, str) or not path:
            raise ConfigError(f"data.corpora.{dom}", "must be a directory path")
    known = set(data.builtin_domains) | set(data.corpora)
    for stage, weights in mixture.items():
        for dom in weights:
            if dom not in known:
                raise ConfigError(f"data.mixture.{stage}.{dom}", f"unknown domain (known: {', '.join(sorted(known))})")
    if data.tokenizer != "byte":
        raise ConfigError("data.tokenizer", f"unknown tokenizer {data.tokenizer!r} (byte)")
    return dataclasses.replace(data, mixture=mixture)


def from_dict(raw: dict, overrides: dict | None = None) -> RunConfig:
    """Validate a parsed TOML document. `overrides` maps dotted keys (e.g. "run.steps") to values."""
    from training.model import ModelConfig

    raw = {k: (dict(v) if isinstance(v, dict) else v) for k, v in raw.items()}
    for dotted, value in (overrides or {}).items():
        section, key = dotted.split(".", 1)
        raw.setdefault(section, {})[key] = value
    known = {f.name for f in dataclasses.fields(RunConfig)}
    for k in raw:
        if k not in known:
            raise ConfigError(k, f"unknown table (known: {', '.join(known)})")
    sections = {
        "run": _section(RunSection, raw.get("run", {}), "run", _CHECKS["run"]),
        "model": ModelConfig.from_dict(raw.get("model", {}), "model"),
        "train": _section(TrainSection, raw.get("train", {}), "train", _CHECKS["train"]),
        "data": _check_data(_section(DataSection, raw.get("data", {}), "data", _CHECKS["data"])),
        "checkpoint": _section(CheckpointSection, raw.get("checkpoint", {}), "checkpoint", _CHECKS["checkpoint"]),
        "sinks": _section(SinksSection, raw.get("sinks", {}), "sinks", _CHECKS["sinks"]),
    }
    t = sections["train"]
    if t.schedule == "wsd" and t.warmup_ratio + t.decay_ratio > 1:
        raise ConfigError("train.decay_ratio", "warmup_ratio + decay_ratio must be <= 1")
    return RunConfig(**sections)


def load(path: str | Path, overrides: dict | None = None) -> RunConfig:
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(str(path), "no such file") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(str(path), f"invalid TOML: {e}") from None
    return from_dict(raw, overrides)
