"""MoE benchmark: `.venv/bin/python bench/moe.py --json` prints one JSON object (progress goes to stderr).

- drop_table: dropped-assignment fraction of the real MoE layer (training/moe.py) at a fixed token batch for
  context lengths 128..4096, standard vs pooled_wave, capacity factors 1.0 and 1.25. The router input is
  text-like: packed documents of lognormal length, each with a topic; tokens come from a Zipfian mixture of
  a global and a per-topic vocabulary with bursty repeats, and the hidden state is the token embedding plus
  the document's topic vector (consecutive tokens route alike). The router bias is first balanced on the
  global stream by the aux-loss-free update itself, as in training, so what is left is per-group skew.
- moe_vs_dense_step_time_ratio: train-step time of the demo MoE LM over a dense LM whose d_ff gives the same
  active FLOPs per token (training/flops.py), measured in alternation.
- ep8_vs_ep1_step_time_ratio: the same MoE step on 8 fake CPU devices (expert axis 8) over 1 device, each in
  its own process (the device count is fixed when JAX starts), same global batch.
- The demo is training/configs/demo.toml ([model] and [train].batch_size) when present.
- mfu: demo MoE model FLOPs/token * tokens/s over the peak measured here with a large fp32 matmul.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SEQS = (128, 256, 512, 1024, 2048, 4096)
DEMO_TOML = ROOT / "training" / "configs" / "demo.toml"


def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def demo_moe():
    """(model config, batch size) of the demo run: training/configs/demo.toml, or a built-in stand-in."""
    from training.config import ModelConfig, MoEConfig, load

    if DEMO_TOML.exists():
        cfg = load(DEMO_TOML)
        if cfg.model.mlp == "moe":
            return cfg.model, cfg.train.batch_size
    return ModelConfig(d_model=128, n_layers=2, n_heads=4, n_kv_heads=4, d_ff=512, seq_len=128, mlp="moe",
                       moe=MoEConfig(n_routed=16, top_k=4, n_shared=2, capacity_factor=1.25)), 16


def matched_dense(moe_cfg):
    """A dense LM whose active FLOPs per token equal the MoE's (d_ff = (k + shared) * expert width + router)."""
    from training.flops import counts

    target = counts(moe_cfg)["flops_per_token"]
    dense = dataclasses.replace(moe_cfg, mlp="dense", moe=None)
    per_ff = 6 * 3 * moe_cfg.d_model * moe_cfg.n_layers  # flops/token per unit of d_ff
    base = counts(dataclasses.replace(dense, d_ff=1))["flops_per_token"] - per_ff
    return dataclasses.replace(dense, d_ff=max(1, round((target - base) / per_ff)))


# ---------------------------------------------------------------- step timing


def make_step(cfg, mesh=None):
    import jax
    import jax.numpy as jnp

    from training import model

    def loss_fn(params, state, tokens):
        logits, aux = model.apply(params, state, tokens, cfg, mesh=mesh)
        logp = jax.nn.log_softmax(logits[:, :-1])
        ce = -jnp.mean(jnp.take_along_axis(logp, tokens[:, 1:, None], -1))
        return ce + aux["aux_loss"], aux

    @jax.jit
    def step(params, state, tokens):
        (loss, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, state, tokens)
        params = jax.tree.map(lambda p, g: p - 1e-2 * g, params, grads)
        return params, model.update_state(state, aux, cfg), loss

    return step


def step_timer(cfg, mesh=None, batch=16):
    """Returns a function timing one train step (seconds), after compiling and warming up."""
    import jax

    from training import model

    params, state = model.init(cfg, jax.random.PRNGKey(0))
    tokens = jax.random.randint(jax.random.PRNGKey(1), (batch, cfg.seq_len), 0, cfg.vocab_size)
    step = make_step(cfg, mesh)
    box = [params, state]
    for _ in range(2):
        box[0], box[1], loss = step(box[0], box[1], tokens)
    jax.block_until_ready(loss)

    def once() -> float:
        t0 = time.perf_counter()
        box[0], box[1], loss = step(box[0], box[1], tokens)
        jax.block_until_ready(loss)
        return time.perf_counter() - t0

    return once


def measured_peak_flops() -> float:
    """Best fp32 matmul FLOP/s on this host (the MFU denominator; CPUs publish no single peak)."""
    import jax

    n = 2048
    a = jax.random.normal(jax.random.PRNGKey(0), (n, n))
    f = jax.jit(lambda a: a @ a)
    jax.block_until_ready(f(a))
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        jax.block_until_ready(f(a))
        best = min(best, time.perf_counter() - t0)
    return 2 * n ** 3 / best


def ep_worker(devices: int, rounds: int) -> dict:
    import jax

    from training.mesh import make_mesh

    cfg, batch = demo_moe()
    # Both runs use groups small enough for 8 devices to hold whole groups, so they compute the same thing.
    group = min(cfg.moe.group_size, batch * cfg.seq_len // 8)
    cfg = dataclasses.replace(cfg, moe=dataclasses.replace(cfg.moe, expert_parallel=devices, group_size=group))
    mesh = make_mesh(cfg) if devices > 1 else None
    t0 = time.perf_counter()
    once = step_timer(cfg, mesh, batch)
    compile_s = time.perf_counter() - t0
    times = [once() for _ in range(rounds)]
    return {"devices": len(jax.devices()), "step_s": statistics.median(times), "compile_s": compile_s,
            "group_size": group}


def run_ep(devices: int, rounds: int) -> dict:
    env = {**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}", "JAX_PLATFORMS": "cpu"}
    out = subprocess.run([sys.executable, __file__, "_ep", str(devices), str(rounds)], env=env,
                         capture_output=True, text=True, check=True, timeout=900)
    return json.loads(out.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- text-like routing skew


class TextLikeStream:
    """Packed documents with topics, Zipfian tokens and bursty repeats; yields router inputs per sequence."""

    def __init__(self, d_model=64, vocab=8192, topics=64, seed=0):
        self.rng = np.random.default_rng(seed)
        r = self.rng
        self.vocab, self.topics = vocab, topics
        zipf = 1.0 / np.arange(1, vocab + 1) ** 1.1
        self.p_global = zipf / zipf.sum()
        self.topic_perm = np.stack([r.permutation(vocab) for _ in range(topics)])
        self.emb = r.normal(size=(vocab, d_model)).astype(np.float32)
        self.topic_vec = r.normal(size=(topics, d_model)).astype(np.float32)

    def _doc(self, n: int, topic: int) -> np.ndarray:
        r = self.rng
        from_topic = r.random(n) < 0.5
        toks = np.where(from_topic, self.topic_perm[topic][r.choice(self.vocab, n, p=self.p_global)],
                        r.choice(self.vocab, n, p=self.p_global))
        # Bursts: a third of the tokens repeat one of the previous 32.
        rep = np.nonzero(r.random(n) < 0.33)[0]
        for i in rep[rep > 0]:
            toks[i] = toks[r.integers(max(0, i - 32), i)]
        return toks

    def sequence(self, length: int) -> np.ndarray:
        """Router inputs [length, d]: documents packed back to back (lognormal lengths, median ~700 tokens)."""
        parts, n = [], 0
        while n < length:
            doc_len = int(min(self.rng.lognormal(np.log(700), 1.0), 4 * length)) + 16
            topic = int(self.rng.integers(self.topics))
            toks = self._doc(doc_len, topic)
            parts.append(self.emb[toks] + 1.0 * self.topic_vec[topic])
            n += doc_len
        x = np.concatenate(parts)
        start = int(self.rng.integers(0, len(x) - length + 1))
        return x[start:start + length]

    def batch(self, tokens: int, seq_len: int) -> np.ndarray:
        return np.concatenate([self.sequence(seq_len) for _ in range(tokens // seq_len)])[None]


def drop_table(tokens=32768, group=4096, batches=2) -> tuple[list[dict], dict]:
    import jax
    import jax.numpy as jnp

    from training import moe
    from training.config import MoEConfig

    D, E = 64, 16
    stream = TextLikeStream(d_model=D)
    base = MoEConfig(n_routed=E, top_k=4, n_shared=0, group_size=group, expert_hidden=4, waves=3)
    p = moe.init(jax.random.PRNGKey(0), D, 4, base, 1.0 / np.sqrt(D), 0.1)

    # Balance the router bias on the global stream with the real update rule (aux-loss-free), as training does.
    load_fn = jax.jit(lambda h, b: jnp.sum(jax.nn.one_hot(moe.route(h, p["router"], b, base)["e_TxK"], E), (0, 1)))
    held_out = jnp.asarray(stream.batch(tokens, 128)[0])

    def imbalance(b):
        load = load_fn(held_out, b)
        return float(load.max() / load.mean())

    bias = jnp.zeros((1, E))
    before = imbalance(bias[0])
    for _ in range(400):
        load = load_fn(jnp.asarray(stream.batch(2048, 128)[0]), bias[0])
        bias = moe.update_bias(bias, load[None], 0.02)
    balanced = imbalance(bias[0])
    log(f"router bias balanced: held-out global max/mean load {before:.3f} -> {balanced:.3f}")

    rows = []
    for seq_len in SEQS:
        hs = [jnp.asarray(stream.batch(tokens, seq_len)) for _ in range(batches)]
        for cf in (1.0, 1.25):
            for mode in ("standard", "pooled_wave"):
                cfg = dataclasses.replace(base, capacity_factor=cf, dispatch=mode)
                f = jax.jit(lambda h, c=cfg: moe.moe_block(h, p, bias[0], c, jnp.float32)[1]["drop_fraction"])
                frac = statistics.mean(float(f(h)) for h in hs)
                rows.append({"mode": mode, "capacity_factor": cf, "seq_len": seq_len,
                             "drop_fraction": round(frac, 4)})
                log(f"drop seq={seq_len} cf={cf} {mode}: {frac:.4f}")
    setup = {"tokens_per_batch": tokens, "group_size": group, "n_groups": tokens // group, "n_routed": E,
             "top_k": 4, "waves": 3, "batches_averaged": batches,
             "global_max_mean_load_before_bias": round(before, 3),
             "global_max_mean_load_after_bias": round(balanced, 3)}
    return rows, setup


def bench_moe(rounds: int) -> dict:
    import jax

    from training.flops import counts

    t_start = time.perf_counter()
    rows, setup = drop_table()

    moe_cfg, batch = demo_moe()
    dense_cfg = matched_dense(moe_cfg)
    log(f"timing demo MoE vs dense d_ff={dense_cfg.d_ff} (matched active FLOPs/token), batch {batch}")
    t_moe, t_dense = step_timer(moe_cfg, batch=batch), step_timer(dense_cfg, batch=batch)
    moe_times, dense_times = [], []
    for _ in range(rounds):  # alternate so that load from other processes hits both alike
        moe_times.append(t_moe())
        dense_times.append(t_dense())
    s_moe, s_dense = statistics.median(moe_times), statistics.median(dense_times)
    log(f"step: moe {s_moe * 1e3:.1f} ms, dense {s_dense * 1e3:.1f} ms")

    log("EP: 1 and 8 fake devices, each in its own process")
    ep1, ep8 = run_ep(1, rounds), run_ep(8, rounds)
    log(f"EP step: 1 device {ep1['step_s'] * 1e3:.1f} ms, 8 devices {ep8['step_s'] * 1e3:.1f} ms")

    peak = measured_peak_flops()
    c_moe, c_dense = counts(moe_cfg), counts(dense_cfg)
    tps = batch * moe_cfg.seq_len / s_moe
    longest = max(SEQS)

    def drop(mode, cf, seq):
        key = (mode, cf, seq)
        return next(r["drop_fraction"] for r in rows if (r["mode"], r["capacity_factor"], r["seq_len"]) == key)

    return {
        "drop_table": rows,
        "drop_setup": setup,
        "pooled_vs_standard_drop_at_longest": {str(cf): round(drop("pooled_wave", cf, longest)
                                                              / max(drop("standard", cf, longest), 1e-9), 3)
                                               for cf in (1.0, 1.25)},
        "moe_vs_dense_step_time_ratio": round(s_moe / s_dense, 3),
        "moe_step_s": round(s_moe, 4),
        "dense_step_s": round(s_dense, 4),
        "moe_flops_per_token": c_moe["flops_per_token"],
        "dense_flops_per_token": c_dense["flops_per_token"],
        "dense_d_ff": dense_cfg.d_ff,
        "ep8_vs_ep1_step_time_ratio": round(ep8["step_s"] / ep1["step_s"], 3),
        "ep1_step_s": round(ep1["step_s"], 4),
        "ep8_step_s": round(ep8["step_s"], 4),
        "ep_group_size": ep8["group_size"],
        "mfu": round(c_moe["flops_per_token"] * tps / peak, 4),
        "tokens_per_second": round(tps, 1),
        "peak_flops_measured": round(peak, 1),
        "demo": {"source": str(DEMO_TOML) if DEMO_TOML.exists() else "built-in", "d_model": moe_cfg.d_model,
                 "n_layers": moe_cfg.n_layers, "seq_len": moe_cfg.seq_len, "batch": batch, "d_ff": moe_cfg.d_ff,
                 "dispatch": moe_cfg.moe.dispatch, "capacity_factor": moe_cfg.moe.capacity_factor,
                 "n_routed": moe_cfg.moe.n_routed, "top_k": moe_cfg.moe.top_k, "n_shared": moe_cfg.moe.n_shared,
                 "params_total": c_moe["params_total"], "params_active": c_moe["params_active"]},
        "host": {"cpus": os.cpu_count(), "jax": jax.__version__, "backend": jax.default_backend()},
        "rounds": rounds,
        "wall_s": round(time.perf_counter() - t_start, 1),
    }


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "_ep":
        print(json.dumps(ep_worker(int(argv[1]), int(argv[2]))))
        return 0
    ap = argparse.ArgumentParser(prog="bench/moe.py", description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    ap.add_argument("--rounds", type=int, default=15, help="timed steps per measurement (median taken)")
    args = ap.parse_args(argv)
    result = bench_moe(args.rounds)
    print(json.dumps(result) if args.json else json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
