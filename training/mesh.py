"""The device mesh and how arrays lie on it: one rules table maps logical axis names to mesh axes.

Every parameter dimension has a logical name (model.param_axes); RULES turns a name into the mesh axes it is
split over (None: replicated), as MaxText's `logical_axis_rules` does. The batch ("batch") is split over every
device: the dense part of the model is data parallel over data x expert, and the MoE layer's shard_map sends
each token's assignments over "expert" to the devices holding its experts. Routed experts ("expert") are split
over "expert", so each device holds n_routed / expert of them, and their Adam moments follow them.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from training.config import MeshSection
from training.errors import ConfigError

DATA_AXIS, EXPERT_AXIS = "data", "expert"
MESH_AXES = (DATA_AXIS, EXPERT_AXIS)
TOKEN_AXES = (DATA_AXIS, EXPERT_AXIS)  # mesh axes the token batch is sharded over

# logical axis -> mesh axes (a tuple: split over their product), or None: replicated. One table for the whole run.
RULES: tuple[tuple[str, Any], ...] = (
    ("batch", TOKEN_AXES),  # sequences of a batch
    ("expert", EXPERT_AXIS),  # routed experts: 1/EP of them per device
    ("vocab", None),  # embedding rows
    ("embed", None),  # d_model
    ("heads", None),  # query heads x head dim
    ("kv", None),  # kv heads x head dim
    ("mlp", None),  # SwiGLU hidden (dense, shared and routed experts)
    ("latent", None),  # routed experts' input width
    ("routed", None),  # router logits (one per routed expert; small, every device routes its own tokens)
    ("layers", None),  # per-layer state such as the router bias
)


def logical_spec(names: tuple[str | None, ...], rules=RULES) -> P:
    """PartitionSpec of an array whose dimensions carry these logical names."""
    table = dict(rules)
    out = []
    for n in names:
        if n is not None and n not in table:
            raise KeyError(f"logical axis {n!r} has no rule (rules: {', '.join(table)})")
        out.append(None if n is None else table[n])
    return P(*out)


def mesh_shape(cfg: MeshSection, n_devices: int) -> tuple[int, int]:
    """(data, expert) for this many devices; data 0 takes whatever the expert axis leaves."""
    expert = cfg.expert
    if n_devices % expert:
        raise ConfigError("mesh.expert", f"the device count ({n_devices}) must divide by the expert axis ({expert})")
    data = cfg.data or n_devices // expert
    if data * expert != n_devices:
        raise ConfigError("mesh.data", f"data x expert = {data} x {expert} = {data * expert} must equal the "
                                       f"device count ({n_devices})")
    return data, expert


def make_mesh(cfg: MeshSection, devices=None) -> jax.sharding.Mesh:
    """The ("data", "expert") mesh over `devices` (default: every device of every process)."""
    devices = list(devices if devices is not None else jax.devices())
    shape = mesh_shape(cfg, len(devices))
    auto = jax.sharding.AxisType.Auto
    if len(devices) == len(jax.devices()):
        # make_mesh orders devices for the interconnect (and by process on many hosts).
        return jax.make_mesh(shape, MESH_AXES, axis_types=(auto, auto), devices=devices)
    return jax.sharding.Mesh(np.asarray(devices).reshape(shape), MESH_AXES, axis_types=(auto, auto))


def shardings(mesh, axes_tree) -> Any:
    """NamedShardings for a tree whose leaves are tuples of logical names."""
    return jax.tree.map(lambda names: NamedSharding(mesh, logical_spec(names)), axes_tree,
                        is_leaf=lambda x: isinstance(x, tuple))


def replicated(mesh) -> NamedSharding:
    return NamedSharding(mesh, P())


def batch_sharding(mesh, ndim: int) -> NamedSharding:
    return NamedSharding(mesh, logical_spec(("batch",) + (None,) * (ndim - 1)))


def put(x, sharding: NamedSharding) -> jax.Array:
    """A host array (the same on every process) as a global array: each process fills only its own shards."""
    x = np.asarray(x)
    return jax.make_array_from_callback(x.shape, sharding, lambda idx: x[idx])


def bytes_per_device(tree) -> dict[str, int]:
    """Bytes of `tree` held by each addressable device (what sharding saves)."""
    out: dict[str, int] = {}
    for leaf in jax.tree.leaves(tree):
        for shard in getattr(leaf, "addressable_shards", []):
            key = str(shard.device.id)
            out[key] = out.get(key, 0) + shard.data.nbytes
    return out
