"""Parameter counts, training FLOPs per token of a ModelConfig (analytic, from the config alone), and MFU.

Convention (PaLM appendix B): training FLOPs/token = 6 * N_matmul_active + 12 * n_layers * seq_len * d_model,
where N_matmul_active counts the weights a token multiplies through (attention projections, the shared experts
and its top_k routed experts or the dense MLP, the router, the output projection) and the second term is the
attention score/value matmuls over the full context (not halved for causality).
"""

from __future__ import annotations

from training.config import ModelConfig


def counts(cfg: ModelConfig) -> dict:
    D, Q = cfg.d_model, cfg.head_dim
    attn = D * cfg.n_heads * Q * 2 + D * cfg.n_kv_heads * Q * 2
    norms = 2 * D
    if cfg.mlp == "moe":
        m, F = cfg.moe, cfg.expert_hidden
        X = m.latent or D
        routed, shared = 3 * X * F, 3 * D * F
        router = D * m.n_routed + (2 * D * X if m.latent else 0)  # router + latent down/up projections
        mlp_total = m.n_routed * routed + m.n_shared * shared + router
        mlp_active = m.top_k * routed + m.n_shared * shared + router
    else:
        mlp_total = mlp_active = 3 * D * cfg.d_ff
    embed = cfg.vocab_size * D
    unembed = 0 if cfg.tie_embeddings else cfg.vocab_size * D
    layer_total, layer_active = attn + norms + mlp_total, attn + norms + mlp_active
    total = embed + unembed + D + cfg.n_layers * layer_total
    active = embed + unembed + D + cfg.n_layers * layer_active
    matmul_active = cfg.n_layers * (attn + mlp_active) + cfg.vocab_size * D
    flops = 6.0 * matmul_active + 12.0 * cfg.n_layers * cfg.seq_len * D
    return {"params_total": int(total), "params_active": int(active), "flops_per_token": float(flops)}


def training_flops(cfg: ModelConfig, tokens: float) -> float:
    """The one count of a run's training compute C: tokens × counts()["flops_per_token"]. A ladder's rungs and its
    target are both counted here, so the law fitted on the rungs is read at the target on the same scale."""
    return float(tokens) * counts(cfg)["flops_per_token"]


def mfu(tokens_per_s: float, flops_per_token: float, peak_flops_per_s: float | None) -> float | None:
    """The one MFU: model FLOPs (counts()["flops_per_token"], attention included) per second / peak; None when
    the peak is unknown. The trainer's dashboard number and bench/moe.py both come from here."""
    if not peak_flops_per_s or not flops_per_token:
        return None
    return tokens_per_s * flops_per_token / peak_flops_per_s
