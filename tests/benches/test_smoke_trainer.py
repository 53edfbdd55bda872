"""Smoke runs of the benches that run the JAX trainer: the tiny config of tests/tiny.py (compiles in seconds)."""

import json

import pytest

from tests.tiny import TinyConfigs

pytestmark = [pytest.mark.slow, pytest.mark.bench]


@pytest.fixture
def tiny(tmp_path):
    return TinyConfigs(tmp_path)


def test_trainer(run_bench, tiny):
    out, _ = run_bench("trainer", "--config", str(tiny()), "--blocks", "1", "--block-steps", "3", "--saves", "1")
    assert out["tokens_per_step"] > 0


def test_first_step(run_bench, tiny):
    # two starts: the cold one and its warm resume, what this asserts (the third, warm_new, is a third compile)
    out, _ = run_bench("trainer", "--first-step", "--config", str(tiny()), "--starts", "2", "--json",
                       topic="first_step")
    assert out["cold_new"]["first_step_s"] > 0 and out["warm_resumed"]["compile_s"] >= 0


def test_chaos(run_bench):
    # Under the suite's load the faults land mid-run; on a quiet box the run may end first (the bench then checks the
    # recovery after it and files "mid_run": false for that fault instead of waiting for steps that never come).
    out, _ = run_bench("chaos", "--steps", "300", "--json")
    assert out["ok"] and out["lost"] == 0 and len(out["faults"]) == 3


def test_scaling_demo(run_bench, tiny, tmp_path):
    """A four-rung ladder of the tiny model and its target: the demo ladder's path, at a smoke's size."""
    base, target = tiny("base.toml"), tiny("target.toml", run={"name": "hero"}, train={"token_budget": 6_000})
    rungs = [("d8", 8, 1_500), ("d12", 12, 2_000), ("d16", 16, 2_500), ("d20", 20, 3_000)]
    lines = ["[ladder]", 'name = "smoke"', f'base = "{base}"', f'target = "{target}"', 'law = "compute"',
             "eval_points = 2", "bootstrap = 10", f'dir = "{tmp_path / "ladder"}"', "[ladder.set]",
             '"model.mlp" = "dense"', '"model.n_layers" = 1', '"model.n_heads" = 2', '"model.n_kv_heads" = 1']
    for name, width, tokens in rungs:
        sets = {"model.d_model": width, "model.d_ff": 2 * width}
        lines += ["[[ladder.rung]]", f'name = "{name}"', f"tokens = {tokens}",
                  "set = { " + ", ".join(f'"{k}" = {json.dumps(v)}' for k, v in sets.items()) + " }"]
    config = tmp_path / "ladder.toml"
    config.write_text("\n".join(lines) + "\n")
    # the dense ladder only: the MoE family's ladder and target take minutes (tests/training/test_ladder.py runs it)
    out, _ = run_bench("scaling", "--demo", "--config", str(config), "--only", "dense", "--json", topic="scaling_demo")
    assert out["demo_forecast"] and out["demo_actual"]
