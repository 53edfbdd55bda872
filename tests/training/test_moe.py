"""The MoE block on one device: routing invariants, capacity and dropping rules, pooled-wave fill, bias update."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from training import moe
from training.config import MoEConfig
from training.layers import swiglu

D, F = 16, 8


def _block(cfg: MoEConfig, seed: int = 0):
    params = moe.init(jax.random.PRNGKey(seed), D, F, cfg, 0.3, 0.3)
    return params


def _tokens(B=4, L=32, seed=1, scale=1.0):
    return scale * jax.random.normal(jax.random.PRNGKey(seed), (B, L, D))


_jit_block = jax.jit(moe.moe_block, static_argnums=(3, 4))


def _run(h, p, bias, cfg):
    return _jit_block(h, p, bias, cfg, jnp.float32)


def _per_token_reference(h_BxLxD, p, bias_E, cfg):
    """Each token's top-k experts, weighted, plus the shared experts: no buffers, no capacity."""
    h_TxD = h_BxLxD.reshape(-1, D)
    rt = moe.route(h_TxD, p["router"], bias_E, cfg)
    w = p["experts"]
    outs = []
    for j in range(cfg.top_k):
        e_T = rt["e_TxK"][:, j]
        g = jnp.einsum("td,tdf->tf", h_TxD, w["w_gate"][e_T])
        u = jnp.einsum("td,tdf->tf", h_TxD, w["w_up"][e_T])
        outs.append(rt["w_TxK"][:, j:j + 1] * jnp.einsum("tf,tfd->td", jax.nn.silu(g) * u, w["w_down"][e_T]))
    y = sum(outs)
    if "shared" in p:
        y = y + swiglu(h_TxD, p["shared"], jnp.float32)
    return y.reshape(h_BxLxD.shape)


@pytest.mark.parametrize("mode,capacity_factor,router", [
    ("standard", None, "sigmoid"), ("standard", 100.0, "softmax"),
    ("pooled_wave", None, "softmax"), ("pooled_wave", 100.0, "sigmoid")])
def test_with_ample_capacity_it_equals_the_per_token_reference(mode, capacity_factor, router):
    cfg = MoEConfig(n_routed=8, top_k=3, n_shared=2, capacity_factor=capacity_factor, dispatch=mode,
                    group_size=32, router=router)
    p = _block(cfg)
    h = _tokens()
    bias = 0.3 * jax.random.normal(jax.random.PRNGKey(5), (8,))
    y, aux = _run(h, p, bias, cfg)
    np.testing.assert_allclose(y, _per_token_reference(h, p, bias, cfg), rtol=1e-5, atol=1e-6)
    assert float(aux["dropped"]) == 0.0 and float(aux["drop_fraction"]) == 0.0
    assert float(jnp.sum(aux["load_E"])) == h.shape[0] * h.shape[1] * cfg.top_k


def test_combine_weights_are_renormalised_and_topk_uses_the_biased_logits():
    cfg = MoEConfig(n_routed=8, top_k=2)
    p = _block(cfg)
    h_TxD = _tokens().reshape(-1, D)
    bias = jnp.zeros((8,)).at[5].set(100.0)
    rt = moe.route(h_TxD, p["router"], bias, cfg)
    assert bool(jnp.all(jnp.any(rt["e_TxK"] == 5, axis=1)))  # the bias forces expert 5 in
    np.testing.assert_allclose(jnp.sum(rt["w_TxK"], axis=1), 1.0, rtol=1e-6)
    # The weights come from the unbiased logits (the bias only chooses).
    s_TxK = jax.nn.sigmoid(jnp.take_along_axis(h_TxD @ p["router"], rt["e_TxK"], axis=1))
    np.testing.assert_allclose(rt["w_TxK"], s_TxK / s_TxK.sum(1, keepdims=True), rtol=1e-5)


def _skewed(cfg: MoEConfig, seed=0):
    """A router where a few experts are strongly preferred, so groups overflow unevenly."""
    bias = jnp.array([3.0, 2.5, 2.0, 1.0] + [0.0] * (cfg.n_routed - 4))[: cfg.n_routed]
    return _block(cfg, seed), bias


def _counts(h, p, bias, cfg, group):
    rt = moe.route(h.reshape(-1, D), p["router"], bias, cfg)
    e = np.asarray(rt["e_TxK"]).reshape(-1, group, cfg.top_k)
    return np.stack([np.bincount(g.ravel(), minlength=cfg.n_routed) for g in e])  # groups x experts


@pytest.mark.parametrize("capacity_factor", [1.0, 1.25, 0.5])
def test_standard_drops_exactly_what_the_capacity_rule_predicts(capacity_factor):
    cfg = MoEConfig(n_routed=8, top_k=2, n_shared=1, capacity_factor=capacity_factor, group_size=32)
    p, bias = _skewed(cfg)
    h = _tokens(B=8, L=16)
    n_GxE = _counts(h, p, bias, cfg, 32)
    C = math.ceil(capacity_factor * 32 * 2 / 8)
    expected = int(np.sum(np.maximum(n_GxE - C, 0)))
    assert expected > 0
    _, aux = _run(h, p, bias, cfg)
    assert int(aux["dropped"]) == expected
    assert float(aux["drop_fraction"]) == pytest.approx(expected / (8 * 16 * 2))


def _pooled_fill_by_hand(n_GxE, C, waves, rotation):
    """Round-robin fill of each expert's pooled capacity, one source at a time, rotated per expert and step."""
    Ng, E = n_GxE.shape
    kept = np.zeros_like(n_GxE)
    for e in range(E):
        free = Ng * C
        for r in range((waves + 1) * C):
            for i in range(Ng):
                g = (i + e + rotation) % Ng  # first-served source rotated by expert and step
                if n_GxE[g, e] > r and free > 0:
                    kept[g, e] += 1
                    free -= 1
    return kept


@pytest.mark.parametrize("waves,rotation", [(0, 0), (1, 5), (3, 2)])
def test_pooled_wave_fills_the_pool_round_robin(waves, rotation):
    cfg = MoEConfig(n_routed=8, top_k=2, capacity_factor=1.0, dispatch="pooled_wave", waves=waves, group_size=16)
    p, bias = _skewed(cfg)
    h = _tokens(B=8, L=16, seed=3)
    n_GxE = _counts(h, p, bias, cfg, 16)
    C = 4
    expected = _pooled_fill_by_hand(n_GxE, C, waves, rotation)
    got = np.asarray(moe.kept_per_group(jnp.asarray(n_GxE), cfg, 16, rotation))
    np.testing.assert_array_equal(got, expected)
    _, aux = _jit_block(h, p, bias, cfg, jnp.float32, rotation=rotation)
    assert int(aux["dropped"]) == int(np.sum(n_GxE - expected))
    standard = int(np.sum(np.maximum(n_GxE - C, 0)))
    if waves == 0:
        assert int(aux["dropped"]) == standard  # wave 0 alone is the standard exchange
    else:
        assert int(aux["dropped"]) <= standard


def test_pooled_wave_lets_overflow_use_capacity_other_sources_left_free():
    # Two groups of 8 tokens, k = 1: group 0 sends everything to expert 0, group 1 to expert 1. C = 4.
    n_GxE = jnp.array([[8, 0], [0, 8]])
    std = MoEConfig(n_routed=2, top_k=1, capacity_factor=1.0, group_size=8)
    np.testing.assert_array_equal(moe.kept_per_group(n_GxE, std, 8), [[4, 0], [0, 4]])
    one_wave = MoEConfig(n_routed=2, top_k=1, capacity_factor=1.0, group_size=8, dispatch="pooled_wave", waves=1)
    np.testing.assert_array_equal(moe.kept_per_group(n_GxE, one_wave, 8), [[8, 0], [0, 8]])
    no_wave = MoEConfig(n_routed=2, top_k=1, capacity_factor=1.0, group_size=8, dispatch="pooled_wave", waves=0)
    np.testing.assert_array_equal(moe.kept_per_group(n_GxE, no_wave, 8), [[4, 0], [0, 4]])


def test_dropped_tokens_keep_shared_experts_and_other_choices():
    cfg = MoEConfig(n_routed=4, top_k=1, n_shared=1, capacity_factor=0.25, group_size=16)
    p = _block(cfg)
    bias = jnp.array([50.0, 0.0, 0.0, 0.0])  # everyone wants expert 0; only C = 1 per group fits
    h = _tokens(B=2, L=16)
    y, aux = _run(h, p, bias, cfg)
    assert int(aux["dropped"]) == 2 * 15
    shared_only = swiglu(h.reshape(-1, D), p["shared"], jnp.float32).reshape(h.shape)
    # The first token of each group is kept (token order); the rest get only the shared expert.
    np.testing.assert_allclose(y[:, 1:], shared_only[:, 1:], rtol=1e-6)
    assert not np.allclose(y[:, 0], shared_only[:, 0])


def test_bias_update_reduces_load_imbalance_and_rate_zero_does_not():
    cfg = MoEConfig(n_routed=8, top_k=2, capacity_factor=1.25, group_size=64)
    p = _block(cfg)
    # A skewed router: every token leans towards experts 0 and 1.
    p["router"] = p["router"].at[:, 0].add(0.4).at[:, 1].add(0.3)
    h = _tokens(B=4, L=64, scale=1.0) + 1.0

    def run(rate):
        bias_NxE = jnp.zeros((1, 8))
        step = jax.jit(lambda b: moe.moe_block(h, p, b[0], cfg, jnp.float32)[1]["load_E"])
        ratios = []
        for _ in range(60):
            load_E = step(bias_NxE)
            ratios.append(float(jnp.max(load_E) / jnp.mean(load_E)))
            if rate:
                bias_NxE = moe.update_bias(bias_NxE, load_E[None], rate)
        return ratios, bias_NxE

    on, bias = run(0.05)
    off, bias_off = run(0.0)
    assert on[0] > 2.0
    assert on[-1] < 0.6 * on[0]
    assert off[-1] == off[0]
    np.testing.assert_allclose(float(jnp.mean(bias)), 0.0, atol=1e-6)  # mean-centred
    assert float(jnp.abs(bias_off).max()) == 0.0


def test_losses_are_logged_with_zero_coefficients_and_gradients_reach_the_router():
    cfg = MoEConfig(n_routed=8, top_k=2, lb_loss_coef=0.0, z_loss_coef=0.0, group_size=32)
    p = _block(cfg)
    h = _tokens()

    def f(p):
        y, aux = moe.moe_block(h, p, jnp.zeros(8), cfg, jnp.float32)
        return jnp.sum(y ** 2), aux

    (_, aux), g = jax.jit(jax.value_and_grad(f, has_aux=True))(p)
    assert float(aux["lb_loss"]) > 0 and float(aux["z_loss"]) > 0
    assert float(jnp.abs(g["router"]).max()) > 0
    m = moe.layer_metrics(3, aux, jnp.zeros(8))
    assert m["train/router/layer_3/routing_hist"].shape == (8,)
    assert 0 < float(m["train/router/layer_3/routing_entropy"]) <= math.log(8) + 1e-6
