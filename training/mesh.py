"""The device mesh: a ("data", "expert") grid; tokens are sharded over both axes, routed experts over "expert"."""

from __future__ import annotations

import jax

from training.config import ModelConfig
from training.errors import ConfigError

TOKEN_AXES = ("data", "expert")  # mesh axes the token batch is sharded over
EXPERT_AXIS = "expert"  # mesh axis the routed experts are sharded over


def make_mesh(cfg: ModelConfig, devices=None):
    """A mesh over all devices, or None with one device and expert_parallel == 1 (no sharding at all)."""
    devices = list(devices if devices is not None else jax.devices())
    ep = cfg.moe.expert_parallel if cfg.moe is not None else 1
    if ep == 1 and len(devices) == 1:
        return None
    if len(devices) % ep:
        raise ConfigError("model.moe.expert_parallel",
                          f"device count ({len(devices)}) must divide by expert_parallel ({ep})")
    auto = jax.sharding.AxisType.Auto
    return jax.make_mesh((len(devices) // ep, ep), ("data", "expert"), axis_types=(auto, auto), devices=devices)
