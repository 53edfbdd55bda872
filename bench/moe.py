"""MoE benchmark: routing drops on text-like batches and the trainer's step by dispatch mode and expert parallelism.
Prints one JSON object (progress goes to stderr)."""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

from harness import ROOT, parser, report

SEQS = (128, 256, 512, 1024, 2048, 4096)
DEMO_TOML = ROOT / "training" / "configs" / "demo.toml"


def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- step timing (the trainer's own step)

LARGER = {"d_model": 256, "n_layers": 4, "n_heads": 8, "n_kv_heads": 2, "d_ff": 512, "seq_len": 128}
LARGER_MOE = {"n_routed": 32, "top_k": 4, "n_shared": 1, "group_size": 128}
LARGER_BATCH = 8
TINY = {"d_model": 32, "n_layers": 1, "n_heads": 2, "n_kv_heads": 1, "d_ff": 64, "seq_len": 32}  # --quick only
TINY_MOE = {"n_routed": 4, "top_k": 2, "group_size": 32}


def run_config(name: str, dispatch: str, data: int, expert: int):
    """The demo run config (or the larger one) on a data x expert mesh with the given dispatch mode."""
    from training.config import load

    over = {"mesh.data": data, "mesh.expert": expert, "model.moe.dispatch": dispatch, "train.eval_every": 0}
    if name in ("larger", "tiny"):
        model, moe_set = (LARGER, LARGER_MOE) if name == "larger" else (TINY, TINY_MOE)
        over.update({f"model.{k}": v for k, v in model.items()})
        over.update({f"model.moe.{k}": v for k, v in moe_set.items()})
        over["train.batch_size"] = LARGER_BATCH if name == "larger" else 4
    return load(DEMO_TOML, over)


def step_timer(cfg):
    """Times the trainer's compiled step (training.step) on cfg's mesh: seconds to device completion."""
    import jax

    from training import mesh as mesh_lib
    from training import step as step_lib

    mesh = mesh_lib.make_mesh(cfg.mesh)
    B, L = cfg.train.batch_size, cfg.model.seq_len
    state = step_lib.jit_init_state(cfg, mesh)(jax.random.PRNGKey(0))
    memory = step_lib.state_memory(state)
    step = step_lib.jit_train_step(cfg, 1, mesh)
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, cfg.model.vocab_size, (B, L + 1), dtype=np.int32)
    tok = mesh_lib.put(tokens, mesh_lib.batch_sharding(mesh, 2))
    dom = mesh_lib.put(np.zeros(B, np.int32), mesh_lib.batch_sharding(mesh, 1))
    lr, one = (mesh_lib.put(np.float32(x), mesh_lib.replicated(mesh)) for x in (1e-3, 1.0))
    box = [state]
    for _ in range(2):
        box[0], m = step(box[0], tok, dom, lr, one)
    jax.block_until_ready(m)

    def once() -> float:
        t0 = time.perf_counter()
        box[0], m = step(box[0], tok, dom, lr, one)
        jax.block_until_ready(m)
        return time.perf_counter() - t0

    return once, memory


def ep_worker(rounds: int, configs: tuple[str, ...] = ("demo", "larger")) -> dict:
    """In a process with N (fake) devices: step time, tokens/s and MFU of demo and larger, standard vs pooled,
    on one mesh for N = 1 and on data 2 x expert 4 for N = 8; and the state memory per device at every EP."""
    import jax

    from training.flops import counts, mfu
    from training.telemetry import peak_flops

    n = len(jax.devices())
    data, expert = (1, 1) if n == 1 else (n // 4, 4)
    peak, how = peak_flops(jax.devices()[0].device_kind, n)
    rows = []
    for name in configs:
        timers = {d: step_timer(run_config(name, d, data, expert)) for d in ("standard", "pooled_wave")}
        times = {d: [] for d in timers}
        for _ in range(rounds):  # alternate so that load from other processes hits both alike
            for d, (once, _) in timers.items():
                times[d].append(once())
        for d, ts in times.items():
            cfg = run_config(name, d, data, expert)
            step_s = statistics.median(ts)
            tps = cfg.train.batch_size * cfg.model.seq_len / step_s
            rows.append({"config": name, "dispatch": d, "devices": n, "mesh": {"data": data, "expert": expert},
                         "step_s": round(step_s, 4), "tokens_per_s": round(tps, 1),
                         "mfu": round(mfu(tps, counts(cfg.model)["flops_per_token"], peak), 4),
                         **timers[d][1]})
            log(f"{name} {d} on {n} devices: {step_s * 1e3:.1f} ms/step, {tps:.0f} tok/s")
    memory = []
    if n > 1:
        from training import mesh as mesh_lib
        from training import step as step_lib

        for ep in (1, 2, 4, 8):
            cfg = run_config("demo", "standard", n // ep, ep)
            state = step_lib.jit_init_state(cfg, mesh_lib.make_mesh(cfg.mesh))(jax.random.PRNGKey(0))
            memory.append({"expert_axis": ep, **step_lib.state_memory(state)})
    return {"devices": n, "peak_flops": peak, "peak_flops_source": how, "rows": rows, "memory_by_ep": memory}


def run_ep(devices: int, rounds: int, configs: tuple[str, ...]) -> dict:
    env = {**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}", "JAX_PLATFORMS": "cpu"}
    out = subprocess.run([sys.executable, __file__, "_ep", str(rounds), *configs], env=env,
                         capture_output=True, text=True, check=True, timeout=1800)
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


def drop_table(tokens=32768, group=4096, batches=2, seqs=SEQS, balance_steps=400) -> tuple[list[dict], dict]:
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
    for _ in range(balance_steps):
        load = load_fn(jnp.asarray(stream.batch(2048, 128)[0]), bias[0])
        bias = moe.update_bias(bias, load[None], 0.02)
    balanced = imbalance(bias[0])
    log(f"router bias balanced: held-out global max/mean load {before:.3f} -> {balanced:.3f}")

    rows = []
    for seq_len in seqs:
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


def bench_moe(rounds: int, quick: bool = False) -> dict:
    import jax

    t_start = time.perf_counter()
    seqs, devices, configs = ((128,), (1,), ("tiny",)) if quick else (SEQS, (1, 8), ("demo", "larger"))
    rows, setup = drop_table(**({"tokens": 4096, "group": 1024, "seqs": seqs, "balance_steps": 20} if quick else {}))
    log(f"step timing: {devices} fake devices, each in its own process (the trainer's step, real mesh)")
    eps = {n: run_ep(n, rounds, configs) for n in devices}
    timing = [r for ep in eps.values() for r in ep["rows"]]

    def t(config, dispatch, devices):
        return next(r for r in timing if (r["config"], r["dispatch"], r["devices"]) == (config, dispatch, devices))

    longest = max(seqs)

    def drop(mode, cf, seq):
        key = (mode, cf, seq)
        return next(r["drop_fraction"] for r in rows if (r["mode"], r["capacity_factor"], r["seq_len"]) == key)

    from training.config import load

    demo = load(DEMO_TOML)
    return {
        "drop_table": rows,
        "drop_setup": setup,
        "pooled_vs_standard_drop_at_longest": {str(cf): round(drop("pooled_wave", cf, longest)
                                                              / max(drop("standard", cf, longest), 1e-9), 3)
                                               for cf in (1.0, 1.25)},
        "step_timing": timing,
        "pooled_vs_standard_step_time": {f"{c}@{n}": round(t(c, "pooled_wave", n)["step_s"]
                                                           / t(c, "standard", n)["step_s"], 3)
                                         for c in configs for n in devices},
        "ep8_vs_ep1_step_time_ratio": {c: round(t(c, "standard", 8)["step_s"] / t(c, "standard", 1)["step_s"], 3)
                                       for c in configs if 8 in devices},
        "memory_by_ep_on_8_devices": eps[8]["memory_by_ep"] if 8 in eps else [],
        "peak_flops": {**{str(n): ep["peak_flops"] for n, ep in eps.items()}, "source": eps[1]["peak_flops_source"]},
        "demo": {"d_model": demo.model.d_model, "n_layers": demo.model.n_layers, "seq_len": demo.model.seq_len,
                 "batch": demo.train.batch_size, "n_routed": demo.model.moe.n_routed, "top_k": demo.model.moe.top_k,
                 "group_size": demo.model.moe.group_size, "capacity_factor": demo.model.moe.capacity_factor},
        "larger": {**LARGER, **LARGER_MOE, "batch": LARGER_BATCH},
        "host": {"cpus": os.cpu_count(), "jax": jax.__version__, "backend": jax.default_backend(),
                 "load1": os.getloadavg()[0]},
        "rounds": rounds, **({"quick": "smoke-sized: not a measurement"} if quick else {}),
        "wall_s": round(time.perf_counter() - t_start, 1),
    }


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "_ep":
        print(json.dumps(ep_worker(int(argv[1]), tuple(argv[2:]) or ("demo", "larger"))))
        return 0
    ap = parser(__doc__, "moe", prog="bench/moe.py")
    ap.add_argument("--rounds", type=int, default=10, help="timed steps per measurement (median taken)")
    ap.add_argument("--quick", action="store_true",
                    help="smoke-sized (one length, one device, a tiny config): the code paths, not a measurement")
    args = ap.parse_args(argv)
    result = bench_moe(args.rounds, args.quick)
    return report("moe", result, args.json, not args.no_save)


if __name__ == "__main__":
    sys.exit(main())
