"""A small decoder-only LM in pure JAX (params are nested dicts of arrays), with a dense or MoE MLP per block.

Shape suffixes: B batch, L sequence, D d_model, H query heads, K kv heads, Q head dim, F MLP hidden, V vocab,
E routed experts, N layers.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp

from training.errors import ConfigError

_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


def _check(ok: bool, key: str, message: str) -> None:
    if not ok:
        raise ConfigError(key, message)


def _from_dict(cls, d: Any, prefix: str, nested: dict | None = None):
    """Build a frozen dataclass from a plain dict, rejecting unknown keys and wrongly typed values."""
    _check(isinstance(d, dict), prefix, "must be a table")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for k, v in d.items():
        key = f"{prefix}.{k}"
        _check(k in fields, key, f"unknown key (known: {', '.join(sorted(fields))})")
        if nested and k in nested:
            kwargs[k] = None if v is None else nested[k](v, key)
            continue
        default = fields[k].default
        if default is None or v is None:
            pass  # optional fields: validate() checks them
        elif isinstance(default, bool):
            _check(isinstance(v, bool), key, "must be true or false")
        elif isinstance(default, int):
            _check(isinstance(v, int) and not isinstance(v, bool), key, f"must be an integer, got {v!r}")
        elif isinstance(default, float):
            _check(isinstance(v, (int, float)) and not isinstance(v, bool), key, f"must be a number, got {v!r}")
            v = float(v)
        elif isinstance(default, str):
            _check(isinstance(v, str), key, f"must be a string, got {v!r}")
        kwargs[k] = v
    return cls(**kwargs)


@dataclass(frozen=True)
class MoEConfig:
    n_routed: int = 16  # routed experts per MoE layer
    top_k: int = 4  # routed experts chosen per token
    n_shared: int = 2  # always-on shared experts (each expert_hidden wide)
    expert_hidden: int | None = None  # SwiGLU hidden width of one expert; None -> d_ff // 2 (half-width experts)
    latent: int | None = None  # routed experts run in this width behind a down/up projection; None = d_model
    capacity_factor: float | None = 1.25  # per group: ceil(cf * group_size * k / n_routed) slots; None = dropless
    dispatch: str = "standard"  # "standard" (capacity per dispatch group) or "pooled_wave" (see training/moe.py)
    waves: int = 3  # pooled_wave: extra spill waves into capacity left free after the first fill
    group_size: int = 256  # tokens per dispatch group (one data shard's slice of the batch); clipped to the batch
    router: str = "sigmoid"  # combine weights: "sigmoid" or "softmax" of the unbiased logits, renormalised over top-k
    bias_update_rate: float = 1e-3  # aux-loss-free balancing: bias += rate * sign(mean_load - load); 0 = off
    lb_loss_coef: float = 0.0  # Switch-style load-balancing loss weight (always computed and logged)
    z_loss_coef: float = 1e-4  # router logit z-loss weight (always computed and logged)
    expert_parallel: int = 1  # size of the mesh's "expert" axis; n_routed must divide by it

    @classmethod
    def from_dict(cls, d: dict, prefix: str = "model.moe") -> "MoEConfig":
        if isinstance(d, dict) and isinstance(d.get("capacity_factor"), str):
            _check(d["capacity_factor"].lower() == "none", f"{prefix}.capacity_factor", "must be a number or 'none'")
            d = {**d, "capacity_factor": None}
        cfg = _from_dict(cls, d, prefix)
        cfg.validate(prefix)
        return cfg

    def validate(self, prefix: str = "model.moe") -> None:
        _check(self.n_routed >= 1, f"{prefix}.n_routed", "must be >= 1")
        _check(1 <= self.top_k <= self.n_routed, f"{prefix}.top_k", f"must be >= 1 and <= n_routed ({self.n_routed})")
        _check(self.n_shared >= 0, f"{prefix}.n_shared", "must be >= 0")
        eh, cf = self.expert_hidden, self.capacity_factor
        _check(eh is None or (isinstance(eh, int) and not isinstance(eh, bool) and eh >= 1),
               f"{prefix}.expert_hidden", f"must be an integer >= 1 or none, got {eh!r}")
        _check(self.latent is None or (isinstance(self.latent, int) and self.latent >= 1),
               f"{prefix}.latent", f"must be an integer >= 1 or none, got {self.latent!r}")
        _check(cf is None or (isinstance(cf, (int, float)) and not isinstance(cf, bool) and cf > 0),
               f"{prefix}.capacity_factor", f"must be a number > 0 or none, got {cf!r}")
        _check(self.dispatch in ("standard", "pooled_wave"), f"{prefix}.dispatch",
               f"unknown dispatch mode {self.dispatch!r} (standard, pooled_wave)")
        _check(self.waves >= 0, f"{prefix}.waves", "must be >= 0")
        _check(self.group_size >= 1, f"{prefix}.group_size", "must be >= 1")
        _check(self.router in ("sigmoid", "softmax"), f"{prefix}.router",
               f"unknown router {self.router!r} (sigmoid, softmax)")
        _check(self.bias_update_rate >= 0, f"{prefix}.bias_update_rate", "must be >= 0")
        _check(self.lb_loss_coef >= 0, f"{prefix}.lb_loss_coef", "must be >= 0")
        _check(self.z_loss_coef >= 0, f"{prefix}.z_loss_coef", "must be >= 0")
        _check(self.expert_parallel >= 1, f"{prefix}.expert_parallel", "must be >= 1")
        _check(self.n_routed % self.expert_parallel == 0, f"{prefix}.expert_parallel",
               f"n_routed ({self.n_routed}) must divide evenly over expert_parallel ({self.expert_parallel})")


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int = 256  # byte-level tokenizer by default
    d_model: int = 128  # residual width
    n_layers: int = 2  # decoder blocks
    n_heads: int = 4  # query heads
    n_kv_heads: int = 4  # key/value heads (GQA when < n_heads; must divide n_heads)
    d_ff: int = 512  # dense SwiGLU hidden width (MoE experts default to half of it)
    seq_len: int = 128  # maximum context length (RoPE tables are built per call, so this only bounds inputs)
    mlp: str = "dense"  # "dense" or "moe"
    moe: MoEConfig | None = None  # MoE settings; required when mlp == "moe" (defaults filled in if omitted)
    dtype: str = "float32"  # activation/compute dtype; params, norms, router and softmax stay float32
    tie_embeddings: bool = True  # reuse the input embedding as the output projection
    rope_theta: float = 10000.0  # RoPE base frequency
    norm_eps: float = 1e-6  # RMSNorm epsilon
    init_std: float = 0.02  # normal init scale; output projections are scaled by 1/sqrt(2 * n_layers)

    def __post_init__(self):
        if self.mlp == "moe" and self.moe is None:
            object.__setattr__(self, "moe", MoEConfig())

    @classmethod
    def from_dict(cls, d: dict, prefix: str = "model") -> "ModelConfig":
        cfg = _from_dict(cls, d, prefix, nested={"moe": lambda v, key: MoEConfig.from_dict(v, key)})
        cfg.validate(prefix)
        return cfg

    def validate(self, prefix: str = "model") -> None:
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff", "seq_len"):
            _check(getattr(self, name) >= 1, f"{prefix}.{name}", "must be >= 1")
        _check(self.d_model % self.n_heads == 0, f"{prefix}.n_heads",
               f"must divide d_model ({self.d_model})")
        _check((self.d_model // self.n_heads) % 2 == 0, f"{prefix}.n_heads", "head dim must be even (RoPE)")
        _check(self.n_heads % self.n_kv_heads == 0, f"{prefix}.n_kv_heads",
               f"must divide n_heads ({self.n_heads})")
        _check(self.mlp in ("dense", "moe"), f"{prefix}.mlp", f"unknown mlp {self.mlp!r} (dense, moe)")
        _check(self.dtype in _DTYPES, f"{prefix}.dtype", f"unknown dtype {self.dtype!r} ({', '.join(_DTYPES)})")
        _check(self.norm_eps > 0, f"{prefix}.norm_eps", "must be > 0")
        if self.moe is not None:
            self.moe.validate(f"{prefix}.moe")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def expert_hidden(self) -> int:
        return (self.moe.expert_hidden if self.moe and self.moe.expert_hidden else max(1, self.d_ff // 2))

    @property
    def compute_dtype(self):
        return _DTYPES[self.dtype]


# ---------------------------------------------------------------- init


def _normal(key, shape, std):
    return std * jax.random.normal(key, shape, jnp.float32)


def init_swiglu(key, d_in: int, hidden: int, std: float, out_std: float, lead: tuple = ()) -> dict:
    k1, k2, k3 = jax.random.split(key, 3)
    return {"w_gate": _normal(k1, lead + (d_in, hidden), std),
            "w_up": _normal(k2, lead + (d_in, hidden), std),
            "w_down": _normal(k3, lead + (hidden, d_in), out_std)}


def init(cfg: ModelConfig, key) -> tuple[dict, dict]:
    """Returns (params, model_state). model_state holds the non-trainable router biases (empty for dense)."""
    if cfg.mlp == "moe":
        from training import moe as moe_lib

    std, out_std = cfg.init_std, cfg.init_std / math.sqrt(2 * cfg.n_layers)
    D, Q = cfg.d_model, cfg.head_dim
    keys = jax.random.split(key, cfg.n_layers + 2)
    params: dict = {"embed": _normal(keys[0], (cfg.vocab_size, D), std), "layers": {}}
    for i in range(cfg.n_layers):
        ka, kq, kk, kv, ko, km = jax.random.split(keys[i + 1], 6)
        layer = {
            "attn_norm": jnp.ones((D,), jnp.float32),
            "wq": _normal(kq, (D, cfg.n_heads * Q), std),
            "wk": _normal(kk, (D, cfg.n_kv_heads * Q), std),
            "wv": _normal(kv, (D, cfg.n_kv_heads * Q), std),
            "wo": _normal(ko, (cfg.n_heads * Q, D), out_std),
            "mlp_norm": jnp.ones((D,), jnp.float32),
        }
        if cfg.mlp == "moe":
            layer["moe"] = moe_lib.init(km, D, cfg.expert_hidden, cfg.moe, std, out_std)
        else:
            layer["mlp"] = init_swiglu(km, D, cfg.d_ff, std, out_std)
        params["layers"][f"{i}"] = layer
    params["final_norm"] = jnp.ones((D,), jnp.float32)
    if not cfg.tie_embeddings:
        params["unembed"] = _normal(keys[-1], (D, cfg.vocab_size), std)
    state = {}
    if cfg.mlp == "moe":
        # step: update_state calls so far; it rotates pooled_wave's first-served source across steps.
        state = {"router_bias_NxE": jnp.zeros((cfg.n_layers, cfg.moe.n_routed), jnp.float32),
                 "step": jnp.zeros((), jnp.int32)}
    return params, state


# ---------------------------------------------------------------- forward


def rms_norm(x_xD, w_D, eps: float):
    x32 = x_xD.astype(jnp.float32)
    y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
    return (y * w_D).astype(x_xD.dtype)


def swiglu(x_xD, p: dict, dtype):
    g = x_xD @ p["w_gate"].astype(dtype)
    u = x_xD @ p["w_up"].astype(dtype)
    return (jax.nn.silu(g) * u) @ p["w_down"].astype(dtype)


def _rope(x_BxLxHxQ, theta: float):
    L, Q = x_BxLxHxQ.shape[1], x_BxLxHxQ.shape[-1]
    inv_freq = 1.0 / (theta ** (jnp.arange(0, Q, 2, dtype=jnp.float32) / Q))
    ang_LxQ2 = jnp.arange(L, dtype=jnp.float32)[:, None] * inv_freq[None, :]
    cos, sin = jnp.cos(ang_LxQ2)[None, :, None, :], jnp.sin(ang_LxQ2)[None, :, None, :]
    x1, x2 = jnp.split(x_BxLxHxQ.astype(jnp.float32), 2, axis=-1)
    out = jnp.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)
    return out.astype(x_BxLxHxQ.dtype)


def attention(x_BxLxD, p: dict, cfg: ModelConfig):
    B, L, _ = x_BxLxD.shape
    H, K, Q, dt = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.compute_dtype
    q_BxLxHxQ = _rope((x_BxLxD @ p["wq"].astype(dt)).reshape(B, L, H, Q), cfg.rope_theta)
    k_BxLxKxQ = _rope((x_BxLxD @ p["wk"].astype(dt)).reshape(B, L, K, Q), cfg.rope_theta)
    v_BxLxKxQ = (x_BxLxD @ p["wv"].astype(dt)).reshape(B, L, K, Q)
    # GQA: group query heads by their kv head instead of repeating k/v.
    q_BxLxKxGxQ = q_BxLxHxQ.reshape(B, L, K, H // K, Q)
    s_BxKxGxLxL = jnp.einsum("blkgq,bmkq->bkglm", q_BxLxKxGxQ, k_BxLxKxQ).astype(jnp.float32) / math.sqrt(Q)
    causal_LxL = jnp.tril(jnp.ones((L, L), bool))
    s_BxKxGxLxL = jnp.where(causal_LxL, s_BxKxGxLxL, -1e30)
    a_BxKxGxLxL = jax.nn.softmax(s_BxKxGxLxL, axis=-1).astype(dt)
    o_BxLxKxGxQ = jnp.einsum("bkglm,bmkq->blkgq", a_BxKxGxLxL, v_BxLxKxQ)
    return o_BxLxKxGxQ.reshape(B, L, H * Q) @ p["wo"].astype(dt)


def apply(params: dict, model_state: dict, tokens_BxL, cfg: ModelConfig, mesh=None):
    """Forward pass. Returns (logits_BxLxV float32, aux) with aux = {"aux_loss", "metrics", "load"}."""
    if cfg.mlp == "moe":
        from training import moe as moe_lib

    dt = cfg.compute_dtype
    x_BxLxD = params["embed"][tokens_BxL].astype(dt)
    aux_loss = jnp.zeros((), jnp.float32)
    metrics: dict = {}
    loads, dropped = [], []
    for i in range(cfg.n_layers):
        p = params["layers"][f"{i}"]
        x_BxLxD = x_BxLxD + attention(rms_norm(x_BxLxD, p["attn_norm"], cfg.norm_eps), p, cfg)
        h_BxLxD = rms_norm(x_BxLxD, p["mlp_norm"], cfg.norm_eps)
        if cfg.mlp == "moe":
            y_BxLxD, layer_aux = moe_lib.moe_block(h_BxLxD, p["moe"], model_state["router_bias_NxE"][i],
                                                   cfg.moe, dt, mesh=mesh, rotation=model_state["step"] + i)
            m = cfg.moe
            aux_loss = aux_loss + m.lb_loss_coef * layer_aux["lb_loss"] + m.z_loss_coef * layer_aux["z_loss"]
            metrics.update(moe_lib.layer_metrics(i, layer_aux, model_state["router_bias_NxE"][i]))
            loads.append(layer_aux["load_E"])
            dropped.append(layer_aux["dropped"])
        else:
            y_BxLxD = swiglu(h_BxLxD, p["mlp"], dt)
        x_BxLxD = x_BxLxD + y_BxLxD
    x_BxLxD = rms_norm(x_BxLxD, params["final_norm"], cfg.norm_eps)
    w_DxV = params["embed"].T if cfg.tie_embeddings else params["unembed"]
    logits_BxLxV = (x_BxLxD @ w_DxV.astype(dt)).astype(jnp.float32)
    aux = {"aux_loss": aux_loss, "metrics": metrics, "load": {}}
    if cfg.mlp == "moe":
        n_assign = tokens_BxL.size * cfg.moe.top_k * cfg.n_layers
        metrics["moe/drop_fraction"] = jnp.sum(jnp.stack(dropped)) / n_assign
        aux["load"] = jnp.stack(loads)  # N x E tokens routed to each expert (before capacity)
    return logits_BxLxV, aux


def update_state(model_state: dict, aux: dict, cfg: ModelConfig) -> dict:
    """Aux-loss-free balancing: move each layer's router bias toward the under-loaded experts."""
    if cfg.mlp != "moe":
        return model_state
    from training import moe as moe_lib

    bias = model_state["router_bias_NxE"]
    if cfg.moe.bias_update_rate:
        bias = moe_lib.update_bias(bias, aux["load"], cfg.moe.bias_update_rate)
    return {"router_bias_NxE": bias, "step": model_state["step"] + 1}


def make_mesh(cfg: ModelConfig, devices=None):
    """A ("data", "expert") mesh over all devices, or None with one device and expert_parallel == 1."""
    devices = list(devices if devices is not None else jax.devices())
    ep = cfg.moe.expert_parallel if cfg.moe is not None else 1
    if ep == 1 and len(devices) == 1:
        return None
    _check(len(devices) % ep == 0, "model.moe.expert_parallel",
           f"device count ({len(devices)}) must divide by expert_parallel ({ep})")
    auto = jax.sharding.AxisType.Auto
    return jax.make_mesh((len(devices) // ep, ep), ("data", "expert"), axis_types=(auto, auto), devices=devices)


def counts(cfg: ModelConfig) -> dict:
    from training.flops import counts as _counts

    return _counts(cfg)
