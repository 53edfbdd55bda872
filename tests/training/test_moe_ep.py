"""Expert parallelism: the MoE layer and LM on 2, 4 and 8 fake CPU devices match the single-device reference.

The device count is fixed when JAX starts, so one worker runs this file in a subprocess with 8 fake CPU
devices; it builds meshes over the first 2, 4 and all 8 of them and compares outputs and gradients with the
references this (one-device) process saved with numpy.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
MODES = ("standard", "pooled_wave")
# (devices, expert_parallel): pure EP on 2 and 8 devices, and a ("data" 2, "expert" 2) mesh on 4.
LAYER_MESHES = ((2, 2), (4, 2), (8, 8))
LM_MESH = (8, 4)  # the whole LM, through make_mesh, on a ("data" 2, "expert" 4) mesh
D = 32


def _moe_cfg(mode: str, ep: int):
    from training.config import MoEConfig

    return MoEConfig(n_routed=8, top_k=2, n_shared=1, capacity_factor=1.0, dispatch=mode, waves=2, group_size=16,
                     lb_loss_coef=0.01, z_loss_coef=1e-3)


def _mesh(ep: int, n_devices: int):
    import jax

    from training.config import MeshSection
    from training.mesh import make_mesh

    return make_mesh(MeshSection(expert=ep), jax.devices()[:n_devices]) if n_devices > 1 else None


def _layer_outputs(mode: str, ep: int, n_devices: int) -> dict:
    """The MoE layer's output, drops, and gradients w.r.t. its input and every parameter."""
    import jax
    import jax.numpy as jnp

    from training import moe

    cfg = _moe_cfg(mode, ep)
    mesh = _mesh(ep, n_devices)
    params = moe.init(jax.random.PRNGKey(0), D, 16, cfg, 0.3, 0.3)
    bias_E = 0.3 * jax.random.normal(jax.random.PRNGKey(2), (8,))  # biased top-k differs from unbiased
    h = jax.random.normal(jax.random.PRNGKey(1), (8, 16, D))

    def f(p, h):
        y, aux = moe.moe_block(h, p, bias_E, cfg, jnp.float32, mesh=mesh)
        loss = jnp.sum(jnp.sin(y)) + cfg.lb_loss_coef * aux["lb_loss"] + cfg.z_loss_coef * aux["z_loss"]
        return loss, (y, aux["dropped"], aux["load_E"])

    (loss, (y, dropped, load)), (gp, gh) = jax.jit(jax.value_and_grad(f, argnums=(0, 1), has_aux=True))(params, h)
    out = {"loss": loss, "y": y, "dropped": dropped, "load": load, "grad_h": gh}
    for path, g in jax.tree_util.tree_leaves_with_path(gp):
        out["grad" + jax.tree_util.keystr(path)] = g
    return {k: np.asarray(v) for k, v in out.items()}


def _lm_outputs(mode: str, ep: int, n_devices: int) -> dict:
    """The whole MoE LM (logits, loss, drop fraction, every gradient leaf) on a mesh from make_mesh."""
    import jax
    import jax.numpy as jnp

    from observatory import contract
    from training import model
    from training.config import ModelConfig

    cfg = ModelConfig(vocab_size=64, d_model=D, n_layers=1, n_heads=2, n_kv_heads=1, d_ff=32, seq_len=16,
                      mlp="moe", moe=_moe_cfg(mode, ep))
    mesh = _mesh(ep, n_devices)
    params, state = model.init(cfg, jax.random.PRNGKey(0))
    bias_NxE = 0.3 * jax.random.normal(jax.random.PRNGKey(2), state["router_bias_NxE"].shape)
    state = {**state, "router_bias_NxE": bias_NxE}
    tokens = jax.random.randint(jax.random.PRNGKey(1), (8, 16), 0, cfg.vocab_size)

    def loss_fn(p):
        logits, aux = model.apply(p, state, tokens, cfg, mesh=mesh)
        logp = jax.nn.log_softmax(logits[:, :-1])
        ce = -jnp.mean(jnp.take_along_axis(logp, tokens[:, 1:, None], -1))
        return ce + aux["aux_loss"], (logits, aux["metrics"][contract.M_DROP])

    (loss, (logits, drop)), grads = jax.jit(jax.value_and_grad(loss_fn, has_aux=True))(params)
    out = {"loss": loss, "logits": logits, "drop": drop}
    for path, g in jax.tree_util.tree_leaves_with_path(grads):
        out["grad" + jax.tree_util.keystr(path)] = g
    return {k: np.asarray(v) for k, v in out.items()}


def _compare(ref: dict, got: dict, label: str) -> list[str]:
    return [f"{label} {k}: max abs diff {np.max(np.abs(got[k] - r)):.3g}"
            for k, r in ref.items() if not np.allclose(got[k], r, rtol=1e-4, atol=2e-5)]


def _worker(ref_dir: str) -> int:
    import jax

    from training.compile_cache import enable_compilation_cache

    enable_compilation_cache(str(ROOT / "var" / "jax-cache"))  # the cache of the test process (training/conftest.py)
    assert len(jax.devices()) == 8, jax.devices()
    errors = []
    for mode in MODES:
        ref = dict(np.load(os.path.join(ref_dir, f"layer-{mode}.npz")))
        for n, ep in LAYER_MESHES:
            errors += _compare(ref, _layer_outputs(mode, ep, n), f"layer {n} devices ep={ep} {mode}")
    ref = dict(np.load(os.path.join(ref_dir, "lm.npz")))
    errors += _compare(ref, _lm_outputs("pooled_wave", LM_MESH[1], LM_MESH[0]), f"LM {LM_MESH} pooled_wave")
    print("\n".join(errors) or "ok")
    return 1 if errors else 0


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    d = tmp_path_factory.mktemp("ep-ref")
    refs = {mode: _layer_outputs(mode, 1, 1) for mode in MODES}
    for mode, out in refs.items():
        np.savez(d / f"layer-{mode}.npz", **out)
    np.savez(d / "lm.npz", **_lm_outputs("pooled_wave", 1, 1))
    return d, refs


def test_expert_parallel_on_2_4_8_devices_matches_single_device(references):
    # Backend optimisation level 0 halves compile time; the fp32 results stay within tolerance.
    flags = "--xla_force_host_platform_device_count=8 --xla_backend_optimization_level=0"
    env = {**os.environ, "XLA_FLAGS": flags, "JAX_PLATFORMS": "cpu",
           "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, __file__, str(references[0])], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert proc.stdout.strip().endswith("ok")


def test_the_reference_drops_and_pooled_wave_drops_less(references):
    std, pooled = references[1]["standard"], references[1]["pooled_wave"]
    assert 0 < pooled["dropped"] < std["dropped"]


if __name__ == "__main__":
    sys.exit(_worker(sys.argv[1]))
