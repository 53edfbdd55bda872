"""A small decoder-only LM in pure JAX (params are nested dicts of arrays), with a dense or MoE MLP per block.

Shape suffixes: B batch, L sequence, D d_model, H query heads, K kv heads, G query heads per kv head, Q head dim,
V vocab, E routed experts, N layers.
"""

from __future__ import annotations

import math
from functools import partial

import jax
import jax.numpy as jnp

from observatory import contract
from training import moe as moe_lib
from training.config import ModelConfig
from training.layers import init_swiglu, normal, rms_norm, swiglu

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


# ---------------------------------------------------------------- init


def init(cfg: ModelConfig, key) -> tuple[dict, dict]:
    """Returns (params, model_state). model_state holds the non-trainable router biases (empty for dense)."""
    std, out_std = cfg.init_std, cfg.init_std / math.sqrt(2 * cfg.n_layers)
    D, Q = cfg.d_model, cfg.head_dim
    keys = jax.random.split(key, cfg.n_layers + 2)
    params: dict = {"embed": normal(keys[0], (cfg.vocab_size, D), std), "layers": {}}
    for i in range(cfg.n_layers):
        ka, kq, kk, kv, ko, km = jax.random.split(keys[i + 1], 6)
        layer = {
            "attn_norm": jnp.ones((D,), jnp.float32),
            "wq": normal(kq, (D, cfg.n_heads * Q), std),
            "wk": normal(kk, (D, cfg.n_kv_heads * Q), std),
            "wv": normal(kv, (D, cfg.n_kv_heads * Q), std),
            "wo": normal(ko, (cfg.n_heads * Q, D), out_std),
            "mlp_norm": jnp.ones((D,), jnp.float32),
        }
        if cfg.mlp == "moe":
            layer["moe"] = moe_lib.init(km, D, cfg.expert_hidden, cfg.moe, std, out_std)
        else:
            layer["mlp"] = init_swiglu(km, D, cfg.d_ff, std, out_std)
        params["layers"][f"{i}"] = layer
    params["final_norm"] = jnp.ones((D,), jnp.float32)
    if not cfg.tie_embeddings:
        params["unembed"] = normal(keys[-1], (D, cfg.vocab_size), std)
    state = {}
    if cfg.mlp == "moe":
        # step: update_state calls so far; it rotates pooled_wave's first-served source across steps.
        state = {"router_bias_NxE": jnp.zeros((cfg.n_layers, cfg.moe.n_routed), jnp.float32),
                 "step": jnp.zeros((), jnp.int32)}
    return params, state


def param_axes(cfg: ModelConfig) -> tuple[dict, dict]:
    """Logical axis names of every array `init` returns, as (params, model_state) trees of name tuples."""
    layer = {"attn_norm": ("embed",), "wq": ("embed", "heads"), "wk": ("embed", "kv"), "wv": ("embed", "kv"),
             "wo": ("heads", "embed"), "mlp_norm": ("embed",)}
    if cfg.mlp == "moe":
        layer["moe"] = moe_lib.param_axes(cfg.moe)
    else:
        layer["mlp"] = {"w_gate": ("embed", "mlp"), "w_up": ("embed", "mlp"), "w_down": ("mlp", "embed")}
    params: dict = {"embed": ("vocab", "embed"), "layers": {f"{i}": dict(layer) for i in range(cfg.n_layers)},
                    "final_norm": ("embed",)}
    if not cfg.tie_embeddings:
        params["unembed"] = ("embed", "vocab")
    state = {"router_bias_NxE": ("layers", "routed"), "step": ()} if cfg.mlp == "moe" else {}
    return params, state


# ---------------------------------------------------------------- forward


def _rope(x_BxLxHxQ, theta: float):
    L, Q = x_BxLxHxQ.shape[1], x_BxLxHxQ.shape[-1]
    inv_freq = 1.0 / (theta ** (jnp.arange(0, Q, 2, dtype=jnp.float32) / Q))
    ang_LxQ2 = jnp.arange(L, dtype=jnp.float32)[:, None] * inv_freq[None, :]
    cos, sin = jnp.cos(ang_LxQ2)[None, :, None, :], jnp.sin(ang_LxQ2)[None, :, None, :]
    x1, x2 = jnp.split(x_BxLxHxQ.astype(jnp.float32), 2, axis=-1)
    out = jnp.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)
    return out.astype(x_BxLxHxQ.dtype)


def attention(x_BxLxD, p: dict, cfg: ModelConfig):
    """Causal GQA self-attention through jax.nn.dot_product_attention (cuDNN flash on GPUs when it applies)."""
    B, L, _ = x_BxLxD.shape
    H, K, Q, dt = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, DTYPES[cfg.dtype]
    q_BxLxHxQ = _rope((x_BxLxD @ p["wq"].astype(dt)).reshape(B, L, H, Q), cfg.rope_theta)
    k_BxLxKxQ = _rope((x_BxLxD @ p["wk"].astype(dt)).reshape(B, L, K, Q), cfg.rope_theta)
    v_BxLxKxQ = (x_BxLxD @ p["wv"].astype(dt)).reshape(B, L, K, Q)
    impl = None if cfg.attention == "auto" else cfg.attention
    o_BxLxHxQ = jax.nn.dot_product_attention(q_BxLxHxQ, k_BxLxKxQ, v_BxLxKxQ, is_causal=True, implementation=impl)
    return o_BxLxHxQ.reshape(B, L, H * Q) @ p["wo"].astype(dt)


REMAT_POLICIES = {"full": None, "dots": jax.checkpoint_policies.dots_with_no_batch_dims_saveable}


def _block(x_BxLxD, p: dict, bias_E, rotation, *, cfg: ModelConfig, mesh):
    """One decoder block. Returns (x_BxLxD, layer_aux); layer_aux is empty for a dense MLP."""
    dt = DTYPES[cfg.dtype]
    x_BxLxD = x_BxLxD + attention(rms_norm(x_BxLxD, p["attn_norm"], cfg.norm_eps), p, cfg)
    h_BxLxD = rms_norm(x_BxLxD, p["mlp_norm"], cfg.norm_eps)
    if cfg.mlp == "moe":
        y_BxLxD, layer_aux = moe_lib.moe_block(h_BxLxD, p["moe"], bias_E, cfg.moe, dt, mesh=mesh, rotation=rotation)
    else:
        y_BxLxD, layer_aux = swiglu(h_BxLxD, p["mlp"], dt), {}
    return x_BxLxD + y_BxLxD, layer_aux


def apply(params: dict, model_state: dict, tokens_BxL, cfg: ModelConfig, mesh=None):
    """Forward pass. Returns (logits_BxLxV float32, aux) with aux = {"aux_loss", "metrics", "load"}."""
    dt = DTYPES[cfg.dtype]
    block = partial(_block, cfg=cfg, mesh=mesh)
    if cfg.remat != "none":  # recompute the block in the backward pass instead of keeping its activations
        block = jax.checkpoint(block, policy=REMAT_POLICIES[cfg.remat])
    x_BxLxD = params["embed"][tokens_BxL].astype(dt)
    aux_loss = jnp.zeros((), jnp.float32)
    metrics: dict = {}
    loads, dropped = [], []
    for i in range(cfg.n_layers):
        moe = cfg.mlp == "moe"
        bias_E = model_state["router_bias_NxE"][i] if moe else None
        rotation = model_state["step"] + i if moe else None
        x_BxLxD, layer_aux = block(x_BxLxD, params["layers"][f"{i}"], bias_E, rotation)
        if moe:
            m = cfg.moe
            aux_loss = aux_loss + m.lb_loss_coef * layer_aux["lb_loss"] + m.z_loss_coef * layer_aux["z_loss"]
            metrics.update(moe_lib.layer_metrics(i, layer_aux, bias_E))
            loads.append(layer_aux["load_E"])
            dropped.append(layer_aux["dropped"])
    x_BxLxD = rms_norm(x_BxLxD, params["final_norm"], cfg.norm_eps)
    w_DxV = params["embed"].T if cfg.tie_embeddings else params["unembed"]
    logits_BxLxV = (x_BxLxD @ w_DxV.astype(dt)).astype(jnp.float32)
    aux = {"aux_loss": aux_loss, "metrics": metrics, "load": {}}
    if cfg.mlp == "moe":
        n_assign = tokens_BxL.size * cfg.moe.top_k * cfg.n_layers
        metrics[contract.M_DROP] = jnp.sum(jnp.stack(dropped)) / n_assign
        aux["load"] = jnp.stack(loads)  # N x E tokens routed to each expert (before capacity)
    return logits_BxLxV, aux


def update_state(model_state: dict, aux: dict, cfg: ModelConfig) -> dict:
    """Aux-loss-free balancing: move each layer's router bias toward the under-loaded experts."""
    if cfg.mlp != "moe":
        return model_state
    bias = model_state["router_bias_NxE"]
    if cfg.moe.bias_update_rate:
        bias = moe_lib.update_bias(bias, aux["load"], cfg.moe.bias_update_rate)
    return {"router_bias_NxE": bias, "step": model_state["step"] + 1}
