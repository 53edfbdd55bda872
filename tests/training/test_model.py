"""The LM: shapes and finiteness, causality through gradients, config validation, counts, state update."""

from __future__ import annotations

import tomllib
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from observatory import contract
from training import model
from jax.sharding import PartitionSpec as P

from training.config import MeshSection, ModelConfig, MoEConfig, RunConfig
from training.errors import ConfigError
from training.flops import counts
from training.mesh import logical_spec, make_mesh

TINY = dict(vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64, seq_len=16)


def _moe(**kw):
    return ModelConfig(**TINY, mlp="moe", moe=MoEConfig(n_routed=8, top_k=2, n_shared=1, group_size=16, **kw))


CONFIGS = {"dense": ModelConfig(**TINY), "moe": _moe(), "moe_pooled": _moe(dispatch="pooled_wave")}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_it_returns_finite_logits_and_metrics(name):
    cfg = CONFIGS[name]
    params, state = model.init(cfg, jax.random.PRNGKey(0))
    tokens = jax.random.randint(jax.random.PRNGKey(1), (2, 16), 0, 64)
    logits, aux = jax.jit(model.apply, static_argnums=3)(params, state, tokens, cfg)
    jaux = aux
    assert logits.shape == (2, 16, 64) and logits.dtype == jnp.float32
    assert bool(jnp.all(jnp.isfinite(logits)))
    if cfg.mlp == "dense":
        assert state == {} and float(aux["aux_loss"]) == 0.0 and aux["metrics"] == {}
        assert model.update_state(state, aux, cfg) is state
    else:
        m = jaux["metrics"]
        assert 0.0 <= float(m[contract.M_DROP]) < 1.0
        for i in range(cfg.n_layers):
            assert m[contract.router_metric(i, "routing_hist")].shape == (8,)
            assert float(jnp.sum(m[contract.router_metric(i, "routing_hist")])) == 2 * 16 * 2
            assert set(m) >= {contract.router_metric(i, name) for name in contract.ROUTER_STATS}
        assert jaux["load"].shape == (2, 8)
        assert float(jaux["aux_loss"]) > 0  # z-loss with its default 1e-4 coefficient
        new = model.update_state(state, jaux, cfg)
        assert new["router_bias_NxE"].shape == (2, 8) and float(jnp.abs(new["router_bias_NxE"]).max()) > 0


@pytest.mark.parametrize("name", list(CONFIGS))
def test_it_is_causal_through_gradients(name):
    cfg = ModelConfig(**{**CONFIGS[name].__dict__, "tie_embeddings": False})
    params, state = model.init(cfg, jax.random.PRNGKey(0))
    tokens = jax.random.permutation(jax.random.PRNGKey(2), 64)[:16][None]  # one distinct token per position
    t = 9

    def out_at_t(embed):
        logits, _ = model.apply({**params, "embed": embed}, state, tokens, cfg)
        return jnp.sum(logits[0, t])

    g_VxD = jax.jit(jax.grad(out_at_t))(params["embed"])
    g_per_pos = jnp.abs(g_VxD[tokens[0]]).sum(-1)
    assert float(g_per_pos[t + 1:].max()) == 0.0
    assert float(g_per_pos[: t + 1].min()) > 0.0


@pytest.mark.parametrize("name", ["dense", "moe"])
def test_changing_future_tokens_leaves_past_logits_alone_even_when_dropping(name):
    cfg = CONFIGS[name] if name == "dense" else _moe(capacity_factor=0.5)
    params, state = model.init(cfg, jax.random.PRNGKey(0))
    a = jax.random.randint(jax.random.PRNGKey(1), (2, 16), 0, 64)
    b = a.at[:, 10:].set((a[:, 10:] + 7) % 64)
    fwd = jax.jit(model.apply, static_argnums=3)
    la, aux = fwd(params, state, a, cfg)
    lb, _ = fwd(params, state, b, cfg)
    np.testing.assert_allclose(la[:, :10], lb[:, :10], rtol=1e-5, atol=1e-6)
    if name == "moe":
        assert float(aux["metrics"][contract.M_DROP]) > 0


@pytest.mark.parametrize("d,key", [
    ({"mlp": "moe", "moe": {"top_k": 17}}, "model.moe.top_k"),
    ({"mlp": "moe", "moe": {"capacity_factor": -1.0}}, "model.moe.capacity_factor"),
    ({"mlp": "moe", "moe": {"dispatch": "ragged"}}, "model.moe.dispatch"),
    ({"mlp": "moe", "moe": {"router": "relu"}}, "model.moe.router"),
    ({"mlp": "moe", "moe": {"topk": 2}}, "model.moe.topk"),
    ({"n_heads": 3}, "model.n_heads"),
    ({"n_kv_heads": 3}, "model.n_kv_heads"),
    ({"d_model": "big"}, "model.d_model"),
    ({"mlp": "sparse"}, "model.mlp"),
    ({"dtype": "float64"}, "model.dtype"),
    ({"colour": 1}, "model.colour"),
])
def test_it_rejects_a_bad_config_naming_the_field(d, key):
    with pytest.raises(ConfigError) as e:
        ModelConfig.from_dict(d)
    assert e.value.key == key
    assert "\n" not in str(e.value)


def test_it_reads_a_valid_config_including_dropless_and_defaults():
    cfg = ModelConfig.from_dict({"d_model": 64, "mlp": "moe", "moe": {"capacity_factor": "none", "top_k": 2}})
    assert cfg.moe.capacity_factor is None and cfg.moe.top_k == 2 and cfg.moe.n_routed == 16
    assert ModelConfig.from_dict({"mlp": "moe"}).moe == MoEConfig()
    assert hash(cfg) == hash(ModelConfig.from_dict({"d_model": 64, "mlp": "moe",
                                                     "moe": {"capacity_factor": None, "top_k": 2}}))


def test_counts_match_the_parameters_and_express_the_hero_shape():
    for cfg in CONFIGS.values():
        params, _ = model.init(cfg, jax.random.PRNGKey(0))
        n = sum(x.size for x in jax.tree_util.tree_leaves(params))
        c = counts(cfg)
        assert c["params_total"] == n
        assert c["flops_per_token"] > 6 * c["params_active"] * 0.5
    dense = counts(CONFIGS["dense"])
    assert dense["params_total"] == dense["params_active"]
    moe = counts(CONFIGS["moe"])
    assert moe["params_active"] < moe["params_total"]
    with open(Path(model.__file__).parent / "configs" / "model_hero.toml", "rb") as f:
        hero = ModelConfig.from_dict(tomllib.load(f)["model"])
    c = counts(hero)
    assert 520e9 < c["params_total"] < 550e9  # "535B"
    assert 21e9 < c["params_active"] < 26e9  # "A23B"


def test_the_mesh_on_one_device_is_1x1_and_a_bad_shape_names_the_field():
    assert dict(make_mesh(MeshSection()).shape) == {"data": 1, "expert": 1}
    with pytest.raises(ConfigError) as e:
        make_mesh(MeshSection(expert=2))
    assert e.value.key == "mesh.expert"
    with pytest.raises(ConfigError) as e:
        RunConfig.from_dict({"model": {"mlp": "moe", "moe": {"n_routed": 12}}, "mesh": {"expert": 8}})
    assert e.value.key == "mesh.expert"


@pytest.mark.parametrize("name", ["moe", "dense"])
def test_every_parameter_has_logical_axes_of_its_rank_and_every_name_has_a_rule(name):
    cfg = CONFIGS[name]
    params, state = model.init(cfg, jax.random.PRNGKey(0))
    p_axes, s_axes = model.param_axes(cfg)
    is_names = lambda x: isinstance(x, tuple)  # noqa: E731
    for tree, axes in ((params, p_axes), (state, s_axes)):
        assert jax.tree.structure(tree) == jax.tree.structure(axes, is_leaf=is_names)
        jax.tree.map(lambda x, names: (len(names) == x.ndim) or pytest.fail(f"{names} vs {x.shape}"), tree, axes,
                     is_leaf=is_names)
        jax.tree.map(logical_spec, axes, is_leaf=is_names)  # raises KeyError on a name without a rule
    if name == "moe":
        assert logical_spec(p_axes["layers"]["0"]["moe"]["experts"]["w_up"]) == P("expert", None, None)
        assert logical_spec(p_axes["embed"]) == P(None, None)


def test_remat_changes_nothing_and_bf16_compute_stays_close():
    import dataclasses

    base = CONFIGS["moe"]
    tokens = jax.random.randint(jax.random.PRNGKey(1), (2, 16), 0, 64)

    def loss_and_grads(cfg):
        params, state = model.init(cfg, jax.random.PRNGKey(0))

        def loss(p):
            logits, aux = model.apply(p, state, tokens, cfg)
            return jnp.mean(jax.nn.logsumexp(logits, -1) - jnp.take_along_axis(logits, tokens[..., None], -1)[..., 0])

        return jax.jit(jax.value_and_grad(loss))(params)

    ref_loss, ref_grads = loss_and_grads(base)
    for remat in ("full", "dots"):
        loss, grads = loss_and_grads(dataclasses.replace(base, remat=remat))
        assert float(loss) == pytest.approx(float(ref_loss), rel=1e-6)
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-7), grads, ref_grads)
    loss16, grads16 = loss_and_grads(dataclasses.replace(base, dtype="bfloat16"))
    assert float(loss16) == pytest.approx(float(ref_loss), rel=2e-2)
    assert all(g.dtype == jnp.float32 for g in jax.tree.leaves(grads16))  # fp32 master weights, fp32 grads
