"""The pure, jitted steps: the train step (loss, gradients, AdamW with the LR as an argument) and the eval step.

The learning rate and the fault multiplier are traced arguments, so re-plans, LR multipliers and injected faults
never recompile. A non-finite loss or gradient skips the update (params, optimizer and router state unchanged)
and is reported, so one bad batch cannot poison the run; the loop decides when to give up.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from observatory import contract
from training import mesh as mesh_lib
from training import model as model_lib
from training.config import RunConfig, TrainSection


def make_optimizer(train_cfg: TrainSection) -> optax.GradientTransformation:
    """AdamW without the LR: the step multiplies the update by -lr itself (decay is decoupled, scaled by lr)."""
    parts = []
    if train_cfg.grad_clip > 0:
        parts.append(optax.clip_by_global_norm(train_cfg.grad_clip))
    parts.append(optax.scale_by_adam(b1=train_cfg.beta1, b2=train_cfg.beta2, eps=train_cfg.eps))
    if train_cfg.weight_decay > 0:
        # Matrices only: norms' scales (1-D) are not decayed.
        parts.append(optax.add_decayed_weights(train_cfg.weight_decay, mask=lambda p: jax.tree.map(
            lambda x: x.ndim >= 2, p)))
    return optax.chain(*parts)


def init_state(cfg: RunConfig, key) -> dict:
    """The whole device-side training state: params, optimizer state, router state and the step RNG."""
    k_init, k_rng = jax.random.split(key)
    params, model_state = model_lib.init(cfg.model, k_init)
    opt_state = make_optimizer(cfg.train).init(params)
    return {"params": params, "opt_state": opt_state, "model_state": model_state, "rng": k_rng}


def state_shardings(cfg: RunConfig, mesh) -> dict:
    """NamedShardings of the whole train state, from the model's logical axes and the mesh rules table.

    The optimizer's per-parameter moments take their parameter's sharding (so expert moments are split over
    "expert" too); its counters, the router state and the RNG are replicated."""
    p_axes, s_axes = model_lib.param_axes(cfg.model)
    p_sh, s_sh = mesh_lib.shardings(mesh, p_axes), mesh_lib.shardings(mesh, s_axes)
    repl = mesh_lib.replicated(mesh)
    abstract = jax.eval_shape(partial(init_state, cfg), jax.random.PRNGKey(0))
    by_path = {jax.tree_util.keystr(path): sh for path, sh in jax.tree_util.tree_flatten_with_path(p_sh)[0]}

    def moment(path, leaf):
        k = jax.tree_util.keystr(path)
        hits = [pk for pk, sh in by_path.items() if k.endswith(pk) and len(sh.spec) <= leaf.ndim]
        return by_path[max(hits, key=len)] if hits and leaf.ndim else repl

    opt_sh = jax.tree_util.tree_map_with_path(moment, abstract["opt_state"])
    return {"params": p_sh, "opt_state": opt_sh, "model_state": s_sh, "rng": repl}


def state_memory(state: dict) -> dict:
    """Bytes of train state on the fullest device: all of it, and the routed experts' params + Adam moments."""
    experts = [x for path, x in jax.tree_util.tree_flatten_with_path(state)[0]
               if "['experts']" in jax.tree_util.keystr(path)]
    per_dev = mesh_lib.bytes_per_device(state)
    per_dev_experts = mesh_lib.bytes_per_device(experts)
    return {"state_bytes_per_device": max(per_dev.values(), default=0),
            "expert_state_bytes_per_device": max(per_dev_experts.values(), default=0)}


def _path_name(path) -> str:
    parts = []
    for p in path:
        parts.append(str(getattr(p, "key", getattr(p, "idx", getattr(p, "name", p)))))
    return "/".join(parts)


def _nll(params, model_state, tokens_BxL1, cfg: RunConfig, mesh):
    """Next-token negative log-likelihood per position, and the model's aux outputs."""
    inputs_BxL, targets_BxL = tokens_BxL1[:, :-1], tokens_BxL1[:, 1:]
    logits_BxLxV, aux = model_lib.apply(params, model_state, inputs_BxL, cfg.model, mesh=mesh)
    logp_BxLxV = jax.nn.log_softmax(logits_BxLxV, axis=-1)
    return -jnp.take_along_axis(logp_BxLxV, targets_BxL[..., None], axis=-1)[..., 0], aux


def _loss_fn(params, model_state, tokens_BxL1, domain_ids_B, loss_scale, cfg, n_domains, mesh):
    nll_BxL, aux = _nll(params, model_state, tokens_BxL1, cfg, mesh)
    ce = jnp.mean(nll_BxL)
    # loss_scale is 1.0 (bit-exact no-op) or NaN for an injected fault: the NaN then flows through the gradient.
    loss = (ce + aux["aux_loss"]) * loss_scale
    seq_nll_B = jnp.mean(nll_BxL, axis=-1)
    dom_sum_D = jax.ops.segment_sum(seq_nll_B, domain_ids_B, num_segments=n_domains)
    dom_cnt_D = jax.ops.segment_sum(jnp.ones_like(seq_nll_B), domain_ids_B, num_segments=n_domains)
    return loss, {"ce": ce, "aux": aux, "dom_sum_D": dom_sum_D, "dom_cnt_D": dom_cnt_D}


def train_step(state: dict, tokens_BxL1, domain_ids_B, lr, loss_scale, *, cfg, n_domains: int, mesh=None):
    """One optimizer step. Returns (new_state, metrics) with metrics a flat dict of device scalars/vectors."""
    params, opt_state, model_state = state["params"], state["opt_state"], state["model_state"]
    tx = make_optimizer(cfg.train)
    (loss, ex), grads = jax.value_and_grad(_loss_fn, has_aux=True)(
        params, model_state, tokens_BxL1, domain_ids_B, loss_scale, cfg, n_domains, mesh)
    updates, new_opt_state = tx.update(grads, opt_state, params)
    updates = jax.tree.map(lambda u: -lr * u, updates)
    new_params = optax.apply_updates(params, updates)
    new_model_state = model_lib.update_state(model_state, ex["aux"], cfg.model)
    grad_norm = optax.global_norm(grads)
    finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)
    if cfg.train.skip_nonfinite:
        keep = lambda new, old: jax.tree.map(lambda n, o: jnp.where(finite, n, o), new, old)  # noqa: E731
        new_params, new_opt_state = keep(new_params, params), keep(new_opt_state, opt_state)
        new_model_state = keep(new_model_state, model_state)
    rng, _ = jax.random.split(state["rng"])
    metrics: dict[str, Any] = {
        contract.M_LOSS: loss,
        contract.M_CE: ex["ce"],
        contract.M_AUX: ex["aux"]["aux_loss"],
        contract.M_GRAD_NORM: grad_norm,
        contract.M_UPDATE_NORM: optax.global_norm(updates),
        contract.M_PARAM_NORM: optax.global_norm(new_params),
        contract.M_LR: lr,
        contract.M_FINITE: finite.astype(jnp.float32),
        "_dom_sum_D": ex["dom_sum_D"],
        "_dom_cnt_D": ex["dom_cnt_D"],
    }
    for path, g in jax.tree_util.tree_flatten_with_path(grads)[0]:
        metrics[contract.grad_norm(_path_name(path))] = jnp.sqrt(jnp.sum(jnp.square(g.astype(jnp.float32))))
    metrics.update(ex["aux"]["metrics"])
    new_state = {"params": new_params, "opt_state": new_opt_state, "model_state": new_model_state, "rng": rng}
    return new_state, metrics


def jit_init_state(cfg: RunConfig, mesh):
    """f(key) -> the train state, created directly in its shardings (no device holds the whole of it)."""
    return jax.jit(partial(init_state, cfg), out_shardings=state_shardings(cfg, mesh))


def jit_train_step(cfg: RunConfig, n_domains: int, mesh):
    """The compiled step: f(state, tokens_BxL1, domain_ids_B, lr, loss_scale) -> (state, metrics).

    State in and out keeps its shardings (donated: updated in place); the batch is split over "batch";
    metrics come back replicated, so any process can read them."""
    st, repl = state_shardings(cfg, mesh), mesh_lib.replicated(mesh)
    return jax.jit(partial(train_step, cfg=cfg, n_domains=n_domains, mesh=mesh),
                   in_shardings=(st, mesh_lib.batch_sharding(mesh, 2), mesh_lib.batch_sharding(mesh, 1), repl, repl),
                   out_shardings=(st, repl), donate_argnums=(0,))


def eval_loss(state: dict, tokens_BxL1, *, cfg: RunConfig, mesh=None):
    """Mean next-token cross-entropy of one batch under the current params (no update, no aux loss)."""
    nll_BxL, _ = _nll(state["params"], state["model_state"], tokens_BxL1, cfg, mesh)
    return jnp.mean(nll_BxL)


def jit_eval_step(cfg: RunConfig, mesh):
    """The compiled eval step: f(state, tokens_BxL1) -> scalar loss (replicated)."""
    repl = mesh_lib.replicated(mesh)
    return jax.jit(partial(eval_loss, cfg=cfg, mesh=mesh),
                   in_shardings=(state_shardings(cfg, mesh), mesh_lib.batch_sharding(mesh, 2)), out_shardings=repl)


def to_host_metrics(metrics: dict, domain_names: list[str]) -> dict[str, float]:
    """Device metrics (already fetched to numpy) to flat published names; vectors become `<name>/<i>`."""
    out: dict[str, float] = {}
    for name, v in metrics.items():
        if name.startswith("_"):
            continue
        a = np.asarray(v)
        if a.ndim == 0:
            out[name] = float(a)
        else:
            for i, x in enumerate(a.reshape(-1)):
                out[f"{name}/{i}"] = float(x)
    s, c = np.asarray(metrics["_dom_sum_D"]), np.asarray(metrics["_dom_cnt_D"])
    for i, d in enumerate(domain_names):
        if c[i] > 0:  # a domain absent from this batch has no loss at this step (not zero)
            out[contract.domain_loss(d)] = float(s[i] / c[i])
    return out
