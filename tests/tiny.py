"""Tiny trainer configs (a 2-layer MoE that compiles in seconds), written as TOML with per-table overrides: the
training tests' `tiny` fixture and the web tests that start a real trainer."""

from __future__ import annotations

import json
from pathlib import Path

# A 2-layer MoE that compiles in seconds and steps in milliseconds on a CPU.
TINY = {
    "run": {"name": "tiny", "seed": 3},
    "model": {"vocab_size": 256, "d_model": 32, "n_layers": 2, "n_heads": 2, "n_kv_heads": 1, "d_ff": 64,
              "seq_len": 32, "mlp": "moe"},
    "model.moe": {"n_routed": 4, "top_k": 2, "n_shared": 1},
    "train": {"batch_size": 4, "lr": 1e-2, "token_budget": 1_000_000, "allow_faults": True},
    "data": {"builtin_domains": ["python_source", "licenses"], "max_bytes_per_domain": 200_000},
    "checkpoint": {"every_steps": 7, "every_minutes": 0.0, "keep_last": 3, "keep_every": 0},
    "sinks": {"heartbeat_s": 0.3},
}

# What the web tests that start the trainer as a subprocess change in TINY: the data, no periodic checkpoints, the
# default learning rate and retention, a slower heartbeat.
WEB_TINY = {"data": {"builtin_domains": ["python_stdlib", "licenses"]},
            "checkpoint": {"every_steps": 0, "keep_every": 1000}, "sinks": {"heartbeat_s": 0.5}}


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {_toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(v)


class TinyConfigs:
    """`tiny(**tables)` writes the tiny config with per-table overrides (e.g. train={"lr": 1.0}; model__moe= for
    [model.moe]) and returns its path; checkpoints go under the test's tmp dir. `tiny.load(...)` parses it."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.written = 0

    def __call__(self, name: str | None = None, **tables) -> Path:
        merged = {k: dict(v) for k, v in TINY.items()}
        merged["checkpoint"]["dir"] = str(self.directory / "ckpt")
        for table, values in tables.items():
            merged.setdefault(table.replace("__", "."), {}).update(values)
        text = "\n".join(f"[{t}]\n" + "\n".join(f"{k} = {_toml_value(v)}" for k, v in vals.items()) + "\n"
                         for t, vals in merged.items())
        self.written += 1
        path = self.directory / (name or f"tiny-{self.written}.toml")
        path.write_text(text)
        return path

    def load(self, **tables):
        from training.config import load

        return load(self(**tables))
