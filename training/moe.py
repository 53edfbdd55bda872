"""Mixture-of-Experts block: shared + routed SwiGLU experts, bias-balanced routing, capacity, EP all-to-all.

Routing, dispatch groups, the standard and pooled-wave capacity modes and expert parallelism are explained in
docs/TRAINING.md "The MoE block in detail".
"""

from __future__ import annotations

import math
from functools import partial

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from observatory import contract
from training.config import MoEConfig
from training.errors import ConfigError
from training.layers import init_swiglu, swiglu
from training.mesh import EXPERT_AXIS, TOKEN_AXES


def init(key, d_model: int, hidden: int, cfg: MoEConfig, std: float, out_std: float) -> dict:
    kr, kg, ku, kd, ks, kl = jax.random.split(key, 6)
    E, X = cfg.n_routed, cfg.latent or d_model
    p = {
        "router": std * jax.random.normal(kr, (d_model, E), jnp.float32),
        "experts": {"w_gate": std * jax.random.normal(kg, (E, X, hidden), jnp.float32),
                    "w_up": std * jax.random.normal(ku, (E, X, hidden), jnp.float32),
                    "w_down": out_std * jax.random.normal(kd, (E, hidden, X), jnp.float32)},
    }
    if cfg.latent:
        k1, k2 = jax.random.split(kl)
        p["latent_down"] = std * jax.random.normal(k1, (d_model, X), jnp.float32)
        p["latent_up"] = std * jax.random.normal(k2, (X, d_model), jnp.float32)
    if cfg.n_shared:
        # n_shared experts of width `hidden` are one SwiGLU of width n_shared * hidden.
        p["shared"] = init_swiglu(ks, d_model, cfg.n_shared * hidden, std, out_std)
    return p


def param_axes(cfg: MoEConfig) -> dict:
    """Logical axis names of `init`'s arrays, in the same tree (training.mesh.RULES maps them to the mesh)."""
    swiglu_axes = {"w_gate": ("embed", "mlp"), "w_up": ("embed", "mlp"), "w_down": ("mlp", "embed")}
    p = {"router": ("embed", "routed"),
         "experts": {"w_gate": ("expert", "latent", "mlp"), "w_up": ("expert", "latent", "mlp"),
                     "w_down": ("expert", "mlp", "latent")}}
    if cfg.latent:
        p["latent_down"], p["latent_up"] = ("embed", "latent"), ("latent", "embed")
    if cfg.n_shared:
        p["shared"] = dict(swiglu_axes)
    return p


# ---------------------------------------------------------------- capacity rules (global view, tiny arrays)


def capacity(cfg: MoEConfig, group: int) -> int:
    """Slots per (group, expert); a token picks an expert at most once, so more than `group` is never needed."""
    if cfg.capacity_factor is None:
        return group
    c = math.ceil(round(cfg.capacity_factor * group * cfg.top_k / cfg.n_routed, 6))
    return max(1, min(group, c))


def slots_per_source(cfg: MoEConfig, group: int) -> int:
    """Buffer slots one group sends per expert: C for standard, (waves + 1) * C for pooled_wave."""
    c = capacity(cfg, group)
    if cfg.dispatch == "pooled_wave" and cfg.capacity_factor is not None:
        return min(group, (cfg.waves + 1) * c)
    return c


def group_size(cfg: MoEConfig, n_tokens: int) -> int:
    g = min(cfg.group_size, n_tokens)
    if n_tokens % g:
        raise ConfigError("model.moe.group_size", f"{g} must divide the tokens per batch ({n_tokens})")
    return g


def kept_per_group(n_GxE, cfg: MoEConfig, group: int, rotation=0):
    """How many of each (group, expert)'s assignments are kept: a prefix of their ranks.

    pooled_wave serves sources in the order g = rotation + e, rotation + e + 1, ... (mod n_groups)."""
    C, S = capacity(cfg, group), slots_per_source(cfg, group)
    if cfg.dispatch == "standard" or cfg.capacity_factor is None:
        return jnp.minimum(n_GxE, C)
    Ng, E = n_GxE.shape
    pool = Ng * C
    offered_GxE = jnp.minimum(n_GxE, S)  # ranks past the last wave are never offered
    # below_RxE[r, e]: assignments of expert e with rank < r, summed over groups (the round-robin fill level).
    r_R = jnp.arange(S + 1)
    below_RxE = jnp.sum(jnp.minimum(offered_GxE[None], r_R[:, None, None]), axis=1)
    full_E = jnp.sum(below_RxE <= pool, axis=0) - 1  # ranks < full_E are kept in every group
    left_E = pool - jnp.take_along_axis(below_RxE, full_E[None], axis=0)[0]
    # At rank full_E the remaining slots go to the sources still offering, in rotated source order.
    wants_GxE = offered_GxE > full_E[None]
    rot_GxE = (jnp.arange(Ng)[:, None] - jnp.arange(E)[None] - rotation) % Ng
    before_GxE = jnp.sum(wants_GxE[None, :, :] & (rot_GxE[None, :, :] < rot_GxE[:, None, :]), axis=1)
    extra_GxE = wants_GxE & (before_GxE < left_E[None])
    return jnp.minimum(offered_GxE, full_E[None]) + extra_GxE.astype(n_GxE.dtype)


# ---------------------------------------------------------------- the routed experts' transport and compute


def _experts(x_ExMxD, w: dict, dtype):
    g = jnp.einsum("emd,edf->emf", x_ExMxD, w["w_gate"].astype(dtype))
    u = jnp.einsum("emd,edf->emf", x_ExMxD, w["w_up"].astype(dtype))
    return jnp.einsum("emf,efd->emd", jax.nn.silu(g) * u, w["w_down"].astype(dtype))


def _routed(x_TxD, e_TxK, r_TxK, keep_TxK, kept_GxE, w: dict, *, group: int, slots: int, pooled_cap: int | None,
            ep_axis: str | None, n_ep: int, dtype):
    """Per-device body: scatter kept assignments into [group, expert, slot] buffers, exchange, run, return.

    Returns out_TxKxD: each assignment's expert output (zeros where dropped)."""
    T, D = x_TxD.shape
    Gl, E = T // group, kept_GxE.shape[1]
    g_TxK = jnp.broadcast_to((jnp.arange(T) // group)[:, None], e_TxK.shape)
    g_TxK = jnp.where(keep_TxK, g_TxK, Gl)  # out of bounds -> not written
    x_TxKxD = jnp.broadcast_to(x_TxD[:, None, :], e_TxK.shape + (D,))
    buf_GxExSxD = jnp.zeros((Gl, E, slots, D), dtype).at[g_TxK, e_TxK, r_TxK].set(x_TxKxD, mode="drop")
    valid_GxExS = jnp.arange(slots)[None, None, :] < kept_GxE[:, :, None]
    El = E // n_ep
    if ep_axis is not None:
        a2a = partial(jax.lax.all_to_all, axis_name=ep_axis, split_axis=1, concat_axis=1)
        recv = a2a(buf_GxExSxD.reshape(Gl, n_ep, El, slots, D))  # [Gl, src, El, slots, D]
        valid = a2a(valid_GxExS.reshape(Gl, n_ep, El, slots))
    else:
        recv = buf_GxExSxD.reshape(Gl, 1, El, slots, D)
        valid = valid_GxExS.reshape(Gl, 1, El, slots)
    M = Gl * n_ep * slots
    x_ExMxD = recv.transpose(2, 0, 1, 3, 4).reshape(El, M, D)
    if pooled_cap is None:
        y_ExMxD = _experts(x_ExMxD, w, dtype)
    else:
        # Compact the waves that arrived into the expert's pooled capacity before the matmuls.
        v_ExM = valid.transpose(2, 0, 1, 3).reshape(El, M)
        cap = min(pooled_cap, M)
        pos_ExM = jnp.where(v_ExM, jnp.cumsum(v_ExM, axis=1) - 1, cap)
        e_ExM = jnp.broadcast_to(jnp.arange(El)[:, None], (El, M))
        packed = jnp.zeros((El, cap, D), dtype).at[e_ExM, pos_ExM].set(x_ExMxD, mode="drop")
        y_packed = _experts(packed, w, dtype)
        y_ExMxD = y_packed[e_ExM, jnp.minimum(pos_ExM, cap - 1)] * v_ExM[..., None].astype(dtype)
    back = y_ExMxD.reshape(El, Gl, n_ep, slots, D).transpose(1, 2, 0, 3, 4)
    if ep_axis is not None:
        back = jax.lax.all_to_all(back, ep_axis, split_axis=1, concat_axis=1)
    out_GxExSxD = back.reshape(Gl, E, slots, D)
    g_safe = jnp.minimum(g_TxK, Gl - 1)
    r_safe = jnp.minimum(r_TxK, slots - 1)
    return out_GxExSxD[g_safe, e_TxK, r_safe] * keep_TxK[..., None].astype(dtype)


# ---------------------------------------------------------------- the block


def route(h_TxD, router_DxE, bias_E, cfg: MoEConfig):
    """fp32 router: top-k on biased logits, combine weights from the unbiased ones. Returns a dict of arrays."""
    logits_TxE = h_TxD.astype(jnp.float32) @ router_DxE.astype(jnp.float32)
    _, e_TxK = jax.lax.top_k(logits_TxE + jax.lax.stop_gradient(bias_E), cfg.top_k)
    chosen_TxK = jnp.take_along_axis(logits_TxE, e_TxK, axis=1)
    if cfg.router == "sigmoid":
        s_TxK = jax.nn.sigmoid(chosen_TxK)
        s_TxE = jax.nn.sigmoid(logits_TxE)
        probs_TxE = s_TxE / jnp.sum(s_TxE, axis=1, keepdims=True)
    else:
        s_TxK = jax.nn.softmax(chosen_TxK, axis=1)
        probs_TxE = jax.nn.softmax(logits_TxE, axis=1)
    w_TxK = s_TxK / jnp.sum(s_TxK, axis=1, keepdims=True)
    return {"logits_TxE": logits_TxE, "e_TxK": e_TxK, "w_TxK": w_TxK, "probs_TxE": probs_TxE}


def moe_block(h_BxLxD, p: dict, bias_E, cfg: MoEConfig, dtype, mesh=None, rotation=0):
    """Shared + routed experts. Returns (y_BxLxD, layer_aux) with counts, losses and keep statistics.

    `rotation` (an int or traced scalar, e.g. step + layer) moves pooled_wave's first-served source."""
    B, L, D = h_BxLxD.shape
    T, E, K = B * L, cfg.n_routed, cfg.top_k
    h_TxD = h_BxLxD.reshape(T, D)
    group = group_size(cfg, T)
    Ng = T // group
    rt = route(h_TxD, p["router"], bias_E, cfg)
    e_TxK = rt["e_TxK"]

    # Rank every assignment inside its (group, expert) in token order (a token picks an expert at most once),
    # so in standard mode whether a token is kept depends only on earlier tokens of its group.
    picks_GxNxE = jnp.sum(jax.nn.one_hot(e_TxK, E, dtype=jnp.int32), axis=1).reshape(Ng, group, E)
    csum_GxNxE = jnp.cumsum(picks_GxNxE, axis=1)
    r_TxK = jnp.take_along_axis(csum_GxNxE.reshape(T, E), e_TxK, axis=1) - 1
    n_GxE = csum_GxNxE[:, -1, :]
    kept_GxE = kept_per_group(n_GxE, cfg, group, rotation)
    g_TxK = jnp.broadcast_to((jnp.arange(T) // group)[:, None], (T, K))
    keep_TxK = r_TxK < kept_GxE[g_TxK, e_TxK]

    slots = slots_per_source(cfg, group)
    pooled = cfg.dispatch == "pooled_wave" and cfg.capacity_factor is not None
    x_TxD = h_TxD.astype(dtype)
    xr_TxX = x_TxD @ p["latent_down"].astype(dtype) if "latent_down" in p else x_TxD
    ep = 1 if mesh is None else mesh.shape[EXPERT_AXIS]
    if mesh is None:
        out_TxKxD = _routed(xr_TxX, e_TxK, r_TxK, keep_TxK, kept_GxE, p["experts"], group=group, slots=slots,
                            pooled_cap=Ng * capacity(cfg, group) if pooled else None, ep_axis=None, n_ep=1,
                            dtype=dtype)
    else:
        n_dev = mesh.shape["data"] * ep
        if E % ep:
            raise ConfigError("mesh.expert", f"n_routed ({E}) must divide over the expert axis ({ep})")
        if T % (n_dev * group):
            raise ConfigError("model.moe.group_size",
                              f"each of {n_dev} devices must hold whole groups: {T} tokens, group_size {group}")
        body = partial(_routed, group=group, slots=slots,
                       pooled_cap=Ng * capacity(cfg, group) if pooled else None, ep_axis=EXPERT_AXIS, n_ep=ep,
                       dtype=dtype)
        tok = P(TOKEN_AXES)
        out_TxKxD = jax.shard_map(body, mesh=mesh, in_specs=(tok, tok, tok, tok, tok, P(EXPERT_AXIS)),
                                  out_specs=tok)(xr_TxX, e_TxK, r_TxK, keep_TxK, kept_GxE, p["experts"])
    w_TxK = (rt["w_TxK"] * keep_TxK).astype(dtype)
    y_TxD = jnp.einsum("tk,tkx->tx", w_TxK, out_TxKxD)
    if "latent_up" in p:
        y_TxD = y_TxD @ p["latent_up"].astype(dtype)
    if "shared" in p:
        y_TxD = y_TxD + swiglu(x_TxD, p["shared"], dtype)

    load_E = jnp.sum(n_GxE, axis=0).astype(jnp.float32)
    frac_E = load_E / (T * K)
    lb_loss = E * jnp.sum(frac_E * jnp.mean(rt["probs_TxE"], axis=0))
    z_loss = jnp.mean(jax.nn.logsumexp(rt["logits_TxE"], axis=1) ** 2)
    dropped = jnp.sum(n_GxE - kept_GxE).astype(jnp.float32)
    aux = {"load_E": load_E, "dropped": dropped, "lb_loss": lb_loss, "z_loss": z_loss,
           "drop_fraction": dropped / (T * K)}
    return y_TxD.reshape(B, L, D), aux


def layer_metrics(i: int, aux: dict, bias_E) -> dict:
    """Per-layer router statistics under the contract's names (vectors are published per element)."""
    load_E = aux["load_E"]
    share_E = load_E / jnp.maximum(jnp.sum(load_E), 1.0)
    stats = {
        "routing_hist": load_E,  # assignments per expert, before capacity
        "routing_entropy": -jnp.sum(jnp.where(share_E > 0, share_E * jnp.log(share_E), 0.0)),  # nats
        "load_balancing_loss": aux["lb_loss"],
        "router_z_loss": aux["z_loss"],
        "capacity_overflow_rate": aux["drop_fraction"],  # dropped / assigned at this layer
        "max_mean_load": jnp.max(load_E) / jnp.maximum(jnp.mean(load_E), 1e-9),
        "router_bias": bias_E,
    }
    return {contract.router_metric(i, name): v for name, v in stats.items()}


def update_bias(bias_NxE, load_NxE, rate: float):
    """bias += rate * sign(mean_load - load), then mean-centred per layer (it only ranks experts)."""
    step = rate * jnp.sign(jnp.mean(load_NxE, axis=-1, keepdims=True) - load_NxE)
    new = bias_NxE + step
    return new - jnp.mean(new, axis=-1, keepdims=True)
