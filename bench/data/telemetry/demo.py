"""The demo trainer's telemetry as data (not a bench): its per-step metric names (training/configs/demo.toml: 4
layers, 16 experts, 4 domains) and one step's values of the right shape, for the live-path benches (bench/telemetry.py
re-exports them)."""

from __future__ import annotations

import math

DOMAINS = ("docs_text", "docstrings", "licenses", "python_stdlib")
LAYERS, EXPERTS = 4, 16


def demo_names() -> list[str]:
    """The demo trainer's per-step metric names (training/configs/demo.toml), as a run of it publishes them."""
    names = ["grad/norm/embed", "grad/norm/final_norm", "grad/norm/total", "params/norm/total", "moe/drop_fraction",
             "optim/learning_rate", "optim/lr_multiplier", "optim/total_steps", "optim/update_norm", "mixture/stage",
             "throughput/mfu", "throughput/tokens_per_second", "throughput/total_tokens", "time/compute_s",
             "time/data_s", "time/host_s", "time/step_s", "train/aux_loss", "train/cross_entropy_loss",
             "train/finite", "train/loss"]
    names += [f"{p}/{d}" for d in DOMAINS for p in ("data/tokens_seen", "mixture/weight", "train/loss")]
    for i in range(LAYERS):
        names += [f"grad/norm/layers/{i}/{w}" for w in (
            "attn_norm", "mlp_norm", "moe/experts/w_down", "moe/experts/w_gate", "moe/experts/w_up", "moe/router",
            "moe/shared/w_down", "moe/shared/w_gate", "moe/shared/w_up", "wk", "wo", "wq", "wv")]
        r = f"train/router/layer_{i}/"
        names += [r + w for w in ("capacity_overflow_rate", "load_balancing_loss", "max_mean_load",
                                  "router_z_loss", "routing_entropy")]
        names += [f"{r}{w}/{e}" for w in ("router_bias", "routing_hist") for e in range(EXPERTS)]
    return names


def demo_values(step: int, rnd) -> dict[str, float]:
    """One step of the demo trainer's metrics as it publishes them (demo_names(), the host's and the publisher's;
    values of the right shape; `rnd`: a random.Random)."""
    loss = (1.5 + 4.0 * (1 + step / 50) ** -0.5) * (1 + rnd.uniform(-0.01, 0.01))
    v = {"train/loss": loss, "train/cross_entropy_loss": loss - 0.01, "train/aux_loss": 0.01, "train/finite": 1.0,
         "grad/norm/total": 0.4 * math.exp(rnd.gauss(0, 0.1)), "optim/update_norm": 0.8 + rnd.gauss(0, 0.02),
         "optim/learning_rate": 3e-3, "optim/lr_multiplier": 1.0, "optim/total_steps": 62_500.0,
         "params/norm/total": 120.0, "moe/drop_fraction": 0.05 * (1 + rnd.gauss(0, 0.1)),
         "throughput/tokens_per_second": 1100 * (1 + rnd.gauss(0, 0.01)), "throughput/mfu": 0.15,
         "throughput/total_tokens": 512.0 * step, "time/step_s": 0.46, "time/data_s": 0.005,
         "time/compute_s": 0.45, "time/host_s": 0.0002, "sys/publish_dropped": 0.0, "sys/publish_queue": 0.0,
         "mixture/stage": 0.0, "hw/cpu_percent": 90.0, "hw/load1": 3.0, "hw/rss_bytes": 7e8}
    for name in demo_names():  # the rest by kind: per domain, per parameter, per router layer (and expert)
        if name in v:
            continue
        v[name] = (loss * (1 + rnd.uniform(-0.03, 0.03)) if name.startswith("train/loss/") else
                   0.25 if name.startswith("mixture/weight/") else 128.0 * step if name.startswith("data/") else
                   0.05 * math.exp(rnd.gauss(0, 0.1)) if name.startswith("grad/norm/") else
                   float(round(128 * math.exp(rnd.gauss(0, 0.1)))) if "/routing_hist/" in name else
                   0.01 * int(name.rsplit("/", 1)[1]) + rnd.gauss(0, 0.001) if "/router_bias/" in name else
                   rnd.random())
    return v
