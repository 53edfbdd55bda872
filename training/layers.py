"""Building blocks shared by the dense LM and the MoE layer: normal init, RMSNorm, SwiGLU.

Shape suffixes: x any leading dims, D model width, F hidden width.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def normal(key, shape, std):
    return std * jax.random.normal(key, shape, jnp.float32)


def init_swiglu(key, d_in: int, hidden: int, std: float, out_std: float) -> dict:
    k1, k2, k3 = jax.random.split(key, 3)
    return {"w_gate": normal(k1, (d_in, hidden), std),
            "w_up": normal(k2, (d_in, hidden), std),
            "w_down": normal(k3, (hidden, d_in), out_std)}


def rms_norm(x_xD, w_D, eps: float):
    x32 = x_xD.astype(jnp.float32)
    y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
    return (y * w_D).astype(x_xD.dtype)


def swiglu(x_xD, p: dict, dtype):
    g_xF = x_xD @ p["w_gate"].astype(dtype)
    u_xF = x_xD @ p["w_up"].astype(dtype)
    return (jax.nn.silu(g_xF) * u_xF) @ p["w_down"].astype(dtype)
