"""Expert parallelism: a MoE LM on 2, 4 and 8 fake CPU devices matches the single-device reference.

The device count is fixed when JAX starts, so each count runs this file as a worker in a subprocess with
XLA_FLAGS set; the worker computes outputs and gradients on its mesh and compares them with the reference that
this (one-device) process saved with numpy.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
MODES = ("standard", "pooled_wave")
# (devices, expert_parallel): pure EP on 2 and 8 devices, and a ("data" 2, "expert" 2) mesh on 4.
MESHES = ((2, 2), (4, 2), (8, 8))


def _cfg(mode: str, ep: int):
    from training.model import ModelConfig, MoEConfig

    moe = MoEConfig(n_routed=8, top_k=2, n_shared=1, capacity_factor=1.0, dispatch=mode, waves=2,
                    group_size=16, expert_parallel=ep, lb_loss_coef=0.01, z_loss_coef=1e-3)
    return ModelConfig(vocab_size=64, d_model=32, n_layers=1, n_heads=2, n_kv_heads=1, d_ff=64, seq_len=16,
                       mlp="moe", moe=moe)


def _outputs(mode: str, ep: int, n_devices: int) -> dict:
    """Logits, loss, drop fraction and every gradient leaf, as numpy, for one mesh."""
    import jax
    import jax.numpy as jnp

    from training import model

    cfg = _cfg(mode, ep)
    mesh = model.make_mesh(cfg, jax.devices()[:n_devices]) if n_devices > 1 else None
    params, state = model.init(cfg, jax.random.PRNGKey(0))
    # A non-zero bias so that the biased top-k differs from the unbiased one.
    state = {"router_bias_NxE": 0.05 * jax.random.normal(jax.random.PRNGKey(2), state["router_bias_NxE"].shape)}
    tokens = jax.random.randint(jax.random.PRNGKey(1), (8, 16), 0, cfg.vocab_size)

    def loss_fn(p):
        logits, aux = model.apply(p, state, tokens, cfg, mesh=mesh)
        logp = jax.nn.log_softmax(logits[:, :-1])
        ce = -jnp.mean(jnp.take_along_axis(logp, tokens[:, 1:, None], -1))
        return ce + aux["aux_loss"], (logits, aux)

    (loss, (logits, aux)), grads = jax.jit(jax.value_and_grad(loss_fn, has_aux=True))(params)
    out = {"loss": loss, "logits": logits, "drop": aux["metrics"]["moe/drop_fraction"], "load": aux["load"]}
    for path, g in jax.tree_util.tree_leaves_with_path(grads):
        out["grad" + jax.tree_util.keystr(path)] = g
    return {k: np.asarray(v) for k, v in out.items()}


def _compare(ref: dict, got: dict, label: str) -> list[str]:
    errors = []
    for k, r in ref.items():
        if not np.allclose(got[k], r, rtol=1e-4, atol=2e-5):
            errors.append(f"{label} {k}: max abs diff {np.max(np.abs(got[k] - r)):.3g}")
    return errors


def _worker(n_devices: int, ref_dir: str) -> int:
    import jax

    assert len(jax.devices()) == n_devices, jax.devices()
    errors = []
    for devices, ep in MESHES:
        if devices != n_devices:
            continue
        for mode in MODES:
            ref = dict(np.load(os.path.join(ref_dir, f"{mode}.npz")))
            errors += _compare(ref, _outputs(mode, ep, n_devices), f"{devices} devices ep={ep} {mode}")
    print("\n".join(errors) or "ok")
    return 1 if errors else 0


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    d = tmp_path_factory.mktemp("ep-ref")
    for mode in MODES:
        out = _outputs(mode, 1, 1)
        assert 0 < out["drop"] < 0.5, "the reference should drop some assignments to exercise capacity"
        np.savez(d / f"{mode}.npz", **out)
    return d


@pytest.fixture(scope="module")
def workers(reference):
    """One worker per device count, all started at once (compiles are mostly single-threaded)."""
    procs = {}
    for n in sorted({d for d, _ in MESHES}):
        env = {**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count={n}",
               "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)}
        procs[n] = subprocess.Popen([sys.executable, __file__, str(n), str(reference)], env=env, cwd=ROOT,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    yield procs
    for proc in procs.values():
        if proc.poll() is None:
            proc.kill()


@pytest.mark.parametrize("n_devices", sorted({d for d, _ in MESHES}))
def test_expert_parallel_matches_single_device(workers, n_devices):
    out, _ = workers[n_devices].communicate(timeout=300)
    assert workers[n_devices].returncode == 0, out[-4000:]


if __name__ == "__main__":
    sys.exit(_worker(int(sys.argv[1]), sys.argv[2]))
