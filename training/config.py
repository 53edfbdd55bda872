"""The run config: typed, frozen dataclasses whose checks sit beside their fields, loaded from TOML and validated.

Every field has a default, a one-line comment and, where a value can be wrong, a check. Checks run whenever a
section is built (from a file, from a `--set` override, or directly in code), so an invalid section cannot
exist. A bad key or value raises ConfigError(<dotted key>, <message>); the command line prints it as
`config error: <key>: <message>` and exits 2. The machinery (fields with checks, the Section base, TOML
coercion, `--set` parsing) is training.config_fields; the sections and loading are here.
"""

from __future__ import annotations

import copy
import dataclasses
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from observatory import contract
from training.config_fields import (Check, Section, _jsonable, at_least, between, nonneg, nonneg_int, one_of,
                                    parse_override, positive, positive_int, setting)
from training.errors import ConfigError

__all__ = ["Check", "ConfigError", "Section", "at_least", "between", "nonneg", "nonneg_int", "one_of",
           "parse_override", "positive", "positive_int", "setting"]  # re-exported from training.config_fields

# Built-in text domains: the first four come from pinned packages (the same on every machine); python_stdlib is
# the interpreter's library (differs between Python versions), an option only.
BUILTIN_DOMAINS = ("python_source", "docstrings", "licenses", "docs_text", "python_stdlib")
DEFAULT_DOMAINS = BUILTIN_DOMAINS[:4]
DOMAIN_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")  # becomes part of metric names
DTYPES = ("float32", "bfloat16")
COMPUTE_ONLY = ("attention", "remat")  # model keys left out of the checkpoint fingerprint


# ---------------------------------------------------------------------------------------------- checks
def _run_name(v: str):
    return None if contract.RUN_ID_RE.match(v) else f"must be {contract.RUN_ID_RULE}"


def _distinct_names(v: tuple) -> str | None:
    return None if v and all(v) and len(set(v)) == len(v) else "must be a list of distinct, non-empty names"


def _builtin_domains(v: tuple) -> str | None:
    unknown = [d for d in v if d not in BUILTIN_DOMAINS]
    if unknown:
        return f"unknown domain {unknown[0]!r} (known: {', '.join(BUILTIN_DOMAINS)})"
    return None if len(set(v)) == len(v) else "must be a list of distinct domain names"


def _corpora(v: dict):
    for name, path in v.items():
        if not DOMAIN_NAME_RE.match(name) or name in BUILTIN_DOMAINS:
            return name, "domain names are letters, digits, _ . - and must differ from the built-in ones"
        if not path:
            return name, "must be a directory path"
    return None


def _fractions(v: tuple) -> str | None:
    ok = v and all(x > 0 for x in v) and abs(sum(v) - 1) < 1e-6
    return None if ok else "must be positive numbers summing to 1"


def _mixture(v: dict):
    for stage, weights in v.items():
        try:
            contract.check_mixture(weights)  # the rule operators' set-mixture commands follow too
        except contract.MixtureError as e:
            return (f"{stage}.{e.domain}" if e.domain is not None else stage), str(e)
    return None


# ---------------------------------------------------------------------------------------------- sections
@dataclass(frozen=True)
class RunSection(Section):
    KEY: ClassVar[str] = "run"
    name: str = setting("demo", _run_name)  # human name; also the default run id (re-running continues it)
    seed: int = setting(0, nonneg_int)  # seeds params init, the data sampler and the step RNG
    steps: int = setting(0, nonneg_int)  # stop after this many steps in total (0 = when the budget is spent)
    compile_cache: str = "var/jax-cache"  # persistent XLA compilation cache: restarts skip compiling ("" = off)
    data_cache: str = "var/data-cache"  # trained tokenizer + encoded domains: restarts skip encoding ("" = off)


@dataclass(frozen=True)
class TrainSection(Section):
    KEY: ClassVar[str] = "train"
    batch_size: int = setting(16, positive_int)  # sequences per step (each model.seq_len + 1 tokens long)
    lr: float = setting(3e-3, positive)  # peak learning rate
    weight_decay: float = setting(0.1, nonneg)  # decoupled (AdamW) weight decay, not applied to norms
    grad_clip: float = setting(1.0, nonneg)  # clip the global gradient norm to this (0 = off)
    beta1: float = setting(0.9, between(0, 1, "must be >= 0 and < 1", open_hi=True))  # Adam first moment
    beta2: float = setting(0.95, between(0, 1, "must be >= 0 and < 1", open_hi=True))  # Adam second moment
    eps: float = setting(1e-8, positive)  # Adam epsilon
    token_budget: int = setting(100_000_000, positive_int)  # planned tokens for the run; the LR spans them
    warmup_ratio: float = setting(0.01, between(0, 0.5, "must be between 0 and 0.5"))  # linear warmup share
    min_lr_ratio: float = setting(0.05, between(0, 1, "must be between 0 and 1"))  # final LR / peak LR
    schedule: str = setting("linear", one_of("linear", "wsd", what="schedule"))  # warmup+decay, or +stable
    decay_ratio: float = setting(0.2, between(0, 1, "must be between 0 and 1"))  # wsd only: final decay share
    skip_nonfinite: bool = True  # skip the update (params unchanged) when the loss or gradient is NaN/Inf
    max_nonfinite_steps: int = setting(25, positive_int)  # fail after this many consecutive non-finite steps
    allow_faults: bool = False  # accept the inject-fault command (demo and tests only)
    peak_flops: float = setting(0.0, nonneg)  # hardware peak FLOP/s for MFU (0 = the telemetry module guesses)
    eval_every: int = setting(250, nonneg_int)  # loss on the held-out split every this many steps (0 = off)

    def check(self) -> None:
        if self.schedule == "wsd" and self.warmup_ratio + self.decay_ratio > 1:
            raise ConfigError("train.decay_ratio", "warmup_ratio + decay_ratio must be <= 1")


@dataclass(frozen=True)
class DataSection(Section):
    KEY: ClassVar[str] = "data"
    builtin_domains: tuple[str, ...] = setting(DEFAULT_DOMAINS, _builtin_domains)  # offline text domains
    corpora: dict[str, str] = setting({}, _corpora)  # extra domain -> directory of .txt/.jsonl/.parquet files
    stages: tuple[str, ...] = setting(("pretrain", "midtrain"), _distinct_names)  # stage names, in order
    stage_fractions: tuple[float, ...] = setting((0.8, 0.2), _fractions)  # token-budget share of each stage
    mixture: dict[str, dict[str, float]] = setting({}, _mixture)  # stage -> {domain: weight}; else presets
    max_bytes_per_domain: int = setting(4_000_000, at_least(1024, "must be at least 1024"))  # read cap
    docstring_source_bytes: int = setting(2_000_000, nonneg_int)  # source parsed for docstrings (~3 MB/s)
    eval_fraction: float = setting(0.02, between(0, 0.5, "must be >= 0 and < 0.5", open_hi=True))  # held out
    # "byte": UTF-8 bytes (vocab 256); "bpe": byte-level BPE of model.vocab_size ids trained on the run's corpus
    tokenizer: str = setting("byte", one_of("byte", "bpe", what="tokenizer"))
    allow_changed_data: bool = False  # resume even when a domain's text hash differs from the checkpoint's
    text_field: str = setting("text", lambda v: None if v else "must name a field")  # JSONL field / Parquet column
    # Directory written by `python -m training data prepare`: train from its token shards ("" = read and tokenize
    # the sources at every start). Its domains and tokenizer kind must be this section's.
    prepared: str = ""

    @property
    def domain_names(self) -> list[str]:
        """Built-in domains first, then user corpora in name order: the order of domain ids."""
        return list(self.builtin_domains) + sorted(self.corpora)

    def check(self) -> None:
        if len(self.stage_fractions) != len(self.stages):
            raise ConfigError("data.stage_fractions", f"needs one fraction per stage ({len(self.stages)})")
        known = self.domain_names
        for stage, weights in self.mixture.items():
            if stage not in self.stages:
                raise ConfigError(f"data.mixture.{stage}", f"unknown stage (stages: {', '.join(self.stages)})")
            for dom in weights:
                if dom not in known:
                    raise ConfigError(f"data.mixture.{stage}.{dom}", f"unknown domain (known: {', '.join(known)})")


@dataclass(frozen=True)
class CheckpointSection(Section):
    KEY: ClassVar[str] = "checkpoint"
    dir: str = setting("var/checkpoints", lambda v: None if v else "must not be empty")  # <dir>/<run id>/
    every_steps: int = setting(50, nonneg_int)  # save every this many steps (0 = off)
    every_minutes: float = setting(1.0, nonneg)  # ... or when this much wall time passed (0 = off)
    keep_last: int = setting(3, positive_int)  # keep the newest K checkpoints
    keep_every: int = setting(1000, nonneg_int)  # ... and every multiple of this step, forever (0 = none)
    recent_every: int = setting(100, nonneg_int)  # ... and every multiple of this step within recent_steps (0 = none)
    recent_steps: int = setting(2000, nonneg_int)  # ... of the newest checkpoint: a late-noticed spike can be undone
    keep_manual: bool = True  # ... and every checkpoint asked for, taken before a destructive command, or final
    max_disk_gb: float = setting(0.0, nonneg)  # then drop the oldest (never the newest) to fit this (0 = no cap)
    async_save: bool = True  # write in the background; the loop only waits for the device->host copy


@dataclass(frozen=True)
class SinksSection(Section):
    KEY: ClassVar[str] = "sinks"
    redis: bool = True  # publish to the run's Redis stream (REDIS_URL) and listen for operator commands
    jsonl: str = ""  # mirror every published record to this JSONL file ("" = off; --metrics-jsonl overrides)
    wandb: str = setting("off", lambda v: None if v in ("off", "offline", "online")
                         else "must be off, offline or online")  # "offline": nothing leaves the machine
    wandb_project: str = "observatory"  # W&B project name
    wandb_dir: str = "var"  # W&B writes <wandb_dir>/wandb/offline-run-*/ (import with manage.py import_wandb)
    heartbeat_s: float = setting(2.0, positive)  # seconds between heartbeats


@dataclass(frozen=True)
class MoEConfig(Section):
    KEY: ClassVar[str] = "model.moe"
    n_routed: int = setting(16, at_least(1))  # routed experts per MoE layer
    top_k: int = setting(4, at_least(1))  # routed experts chosen per token
    n_shared: int = setting(2, at_least(0))  # always-on shared experts (each expert_hidden wide)
    expert_hidden: int | None = setting(None, at_least(1, "must be an integer >= 1 or none"))  # None: d_ff // 2
    latent: int | None = setting(None, at_least(1, "must be an integer >= 1 or none"))  # routed width; None=D
    capacity_factor: float | None = setting(1.25, positive)  # ceil(cf * group * k / n_routed) slots; None=dropless
    dispatch: str = setting("standard", one_of("standard", "pooled_wave", what="dispatch mode"))  # see moe.py
    waves: int = setting(3, at_least(0))  # pooled_wave: extra spill waves into capacity left free
    group_size: int = setting(256, at_least(1))  # tokens per dispatch group; clipped to the batch
    router: str = setting("sigmoid", one_of("sigmoid", "softmax", what="router"))  # combine-weight function
    bias_update_rate: float = setting(1e-3, nonneg)  # aux-loss-free balancing step size (0 = off)
    lb_loss_coef: float = setting(0.0, nonneg)  # Switch-style load-balancing loss weight (always logged)
    z_loss_coef: float = setting(1e-4, nonneg)  # router logit z-loss weight (always logged)

    def check(self) -> None:
        if self.top_k > self.n_routed:
            raise ConfigError("model.moe.top_k", f"must be >= 1 and <= n_routed ({self.n_routed})")


@dataclass(frozen=True)
class ModelConfig(Section):
    KEY: ClassVar[str] = "model"
    vocab_size: int = setting(256, at_least(1))  # byte-level tokenizer by default
    d_model: int = setting(128, at_least(1))  # residual width
    n_layers: int = setting(2, at_least(1))  # decoder blocks
    n_heads: int = setting(4, at_least(1))  # query heads
    n_kv_heads: int = setting(4, at_least(1))  # key/value heads (GQA when < n_heads; must divide n_heads)
    d_ff: int = setting(512, at_least(1))  # dense SwiGLU hidden width (MoE experts default to half of it)
    seq_len: int = setting(128, at_least(1))  # context length of the training batches
    mlp: str = setting("dense", one_of("dense", "moe", what="mlp"))  # "dense" or "moe"
    moe: MoEConfig | None = None  # MoE settings; filled with defaults when mlp == "moe" and omitted
    dtype: str = setting("float32", one_of(*DTYPES, what="dtype"))  # compute dtype; params stay float32
    attention: str = setting("auto", one_of("auto", "xla", "cudnn", what="attention"))  # dot_product_attention
    remat: str = setting("none", one_of("none", "full", "dots", what="remat policy"))  # recompute in backward
    tie_embeddings: bool = True  # reuse the input embedding as the output projection
    rope_theta: float = 10000.0  # RoPE base frequency
    norm_eps: float = setting(1e-6, positive)  # RMSNorm epsilon
    init_std: float = 0.02  # normal init scale; output projections are scaled by 1/sqrt(2 * n_layers)

    def __post_init__(self):
        if self.mlp == "moe" and self.moe is None:
            object.__setattr__(self, "moe", MoEConfig())
        super().__post_init__()

    def check(self) -> None:
        if self.d_model % self.n_heads:
            raise ConfigError("model.n_heads", f"must divide d_model ({self.d_model})")
        if (self.d_model // self.n_heads) % 2:
            raise ConfigError("model.n_heads", "head dim must be even (RoPE)")
        if self.n_heads % self.n_kv_heads:
            raise ConfigError("model.n_kv_heads", f"must divide n_heads ({self.n_heads})")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def expert_hidden(self) -> int:
        return self.moe.expert_hidden if self.moe and self.moe.expert_hidden else max(1, self.d_ff // 2)


@dataclass(frozen=True)
class MeshSection(Section):
    KEY: ClassVar[str] = "mesh"
    data: int = setting(0, nonneg_int)  # "data" axis size (0 = every device the other axes leave)
    expert: int = setting(1, positive_int)  # "expert" axis size: each device holds n_routed / expert experts


@dataclass(frozen=True)
class DistributedSection(Section):
    KEY: ClassVar[str] = "distributed"
    # Empty/negative values fall back to OBS_COORDINATOR, OBS_NUM_PROCESSES and OBS_PROCESS_ID; with neither,
    # one process (no jax.distributed). Every process runs the same command line and config.
    coordinator: str = ""  # host:port of process 0's coordinator service
    num_processes: int = setting(0, nonneg_int)  # processes in the job (0 = from the environment, else 1)
    process_id: int = setting(-1, at_least(-1, "must be -1 (from the environment) or an index >= 0"))  # index
    timeout_s: int = setting(300, positive_int)  # how long processes wait for each other at start-up


@dataclass(frozen=True)
class ExperimentSection(Section):
    KEY: ClassVar[str] = "experiment"
    name: str = ""  # the experiment this run tests (published with the run; "" = none)
    goal: str = ""  # what the experiment is for, in a sentence
    hypothesis: str = ""  # what it expects to see
    # A pre-registration (python -m training ladder writes one): refused unless it verifies, was made for this
    # config (training.experiment.config_hash) and run id, and before the run's first start; "" = no forecast.
    forecast: str = ""


@dataclass(frozen=True)
class RunConfig(Section):
    run: RunSection = RunSection()  # [run]
    model: ModelConfig = ModelConfig()  # [model] and [model.moe]
    train: TrainSection = TrainSection()  # [train]
    data: DataSection = DataSection()  # [data]
    checkpoint: CheckpointSection = CheckpointSection()  # [checkpoint]
    sinks: SinksSection = SinksSection()  # [sinks]
    mesh: MeshSection = MeshSection()  # [mesh]: not in the fingerprint, so a run may resume on another mesh
    distributed: DistributedSection = DistributedSection()  # [distributed]: multi-host jobs
    experiment: ExperimentSection = ExperimentSection()  # [experiment]: not in the config hash (training.experiment)

    def check(self) -> None:
        if self.data.tokenizer == "byte" and self.model.vocab_size < 256:
            raise ConfigError("model.vocab_size", "must be >= 256 for the byte tokenizer")
        if self.data.tokenizer == "bpe" and self.model.vocab_size < 512:
            raise ConfigError("model.vocab_size", "must be >= 512 for a BPE tokenizer (256 bytes + merges)")
        moe = self.model.moe if self.model.mlp == "moe" else None
        if moe is not None and moe.n_routed % self.mesh.expert:
            raise ConfigError("mesh.expert", f"n_routed ({moe.n_routed}) must divide evenly over the expert "
                                             f"axis ({self.mesh.expert})")

    def to_dict(self) -> dict:
        """Plain JSON-able dict of every field (defaults included): what the `run` message carries."""
        return _jsonable(dataclasses.asdict(self))

    def fingerprint(self) -> dict:
        """The parts a checkpoint must agree with: the state's shapes and the sampler's meaning depend on them."""
        d = self.to_dict()
        for how in COMPUTE_ONLY:  # how the step computes, not what the state is: free to change on resume
            d["model"].pop(how)
        out = {"model": d["model"], "data.tokenizer": d["data"]["tokenizer"], "data.stages": d["data"]["stages"],
               "data.domains": self.data.domain_names}
        if self.data.prepared:  # the shard loader's position is another state than the in-memory sampler's
            out["data.loader"] = "prepared shards"
        return out


# ---------------------------------------------------------------------------------------------- loading
def from_dict(raw: dict, overrides: dict[str, Any] | None = None) -> RunConfig:
    """Validate a parsed TOML document. `overrides` maps dotted keys (e.g. "model.moe.top_k") to values."""
    raw = copy.deepcopy(raw)
    for dotted, value in (overrides or {}).items():
        *tables, leaf = dotted.split(".")
        node = raw
        for i, t in enumerate(tables):
            node = node.setdefault(t, {})
            if not isinstance(node, dict):
                raise ConfigError(".".join(tables[: i + 1]), "is a value, not a table")
        node[leaf] = value
    return RunConfig.from_dict(raw)


def read_toml(path: str | Path) -> dict[str, Any]:
    """A TOML file's table; ConfigError naming the file when it is missing or not TOML (run and ladder configs)."""
    try:
        return tomllib.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(str(path), "no such file") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(str(path), f"invalid TOML: {e}") from None


def load(path: str | Path, overrides: dict[str, Any] | None = None) -> RunConfig:
    return from_dict(read_toml(path), overrides)
