"""The GPU hero check stays ready (deploy/gpu/): its config loads at >= 1B total parameters, and its summary reads
the trainer's own jsonl records (medians past warm-up, the MoE/dense step-time ratio)."""

import importlib.util
import json
from pathlib import Path

import pytest

from training.config import load
from training.flops import counts, training_flops

ROOT = Path(__file__).resolve().parents[2]


def _summarise_module():
    spec = importlib.util.spec_from_file_location("gpu_summarise", ROOT / "deploy/gpu/summarise.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_hero_config_is_a_billion_parameter_moe_and_its_dense_twin_loads():
    moe = load(ROOT / "deploy/gpu/hero_1b.toml")
    dense = load(ROOT / "deploy/gpu/hero_1b.toml", {"model.mlp": "dense"})
    assert moe.model.mlp == "moe" and counts(moe.model)["params_total"] >= 1_000_000_000
    assert counts(dense.model)["params_total"] < counts(moe.model)["params_active"] * 2
    assert moe.model.dtype == "bfloat16" and not moe.sinks.redis


def _write_run(path: Path, step_s: float, n: int) -> None:
    recs = [{"kind": "event", "name": "compiled", "step": 0, "payload": {"seconds": 9.0, "params_total": 7}}]
    for step in range(1, n + 1):
        recs.append({"kind": "metrics", "step": step, "values": {
            "time/step_s": 100.0 if step <= 2 else step_s, "throughput/mfu": 0.4, "train/loss": 10.0 - step}})
    path.write_text("\n".join(json.dumps(r) for r in recs) + "\n")


def test_summary_takes_medians_past_warm_up_and_the_step_time_ratio(tmp_path):
    mod = _summarise_module()
    _write_run(tmp_path / "moe.jsonl", 0.3, 10)
    _write_run(tmp_path / "dense.jsonl", 0.2, 10)
    moe = mod.summarise(str(tmp_path / "moe.jsonl"), skip=2)
    assert moe["steps_measured"] == 8 and moe["step_s_median"] == 0.3 and moe["final_loss"] == 0.0
    assert moe["compile_s"] == 9.0 and moe["drop_fraction_median"] is None
    dense = mod.summarise(str(tmp_path / "dense.jsonl"), skip=2)
    assert abs(moe["step_s_median"] / dense["step_s_median"] - 1.5) < 1e-9


def test_the_gpu_ladder_is_the_heros_moe_family_at_real_sizes_and_forecasts_the_hero():
    """deploy/gpu/ladder_moe.toml: MoE rungs of hero_1b.toml's routing and depth, 8 tokens per active parameter, the
    calibrated band; its target is the hero's model (hero_1b.toml's shapes) about 3x past the largest rung, with its
    last evaluation at its last step and enough of them past half the budget for forecast_deviation to judge."""
    from observatory.anomalies.forecast import ForecastDetector
    from training.ladder import load_ladder, target_cfg

    ladder = load_ladder(ROOT / "deploy/gpu/ladder_moe.toml")
    hero, tcfg = load(ROOT / "deploy/gpu/hero_1b.toml"), target_cfg(ladder)
    assert ladder.band == "calibrated" and ladder.law == "compute" and len(ladder.rungs) >= 4
    for k in ("d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff", "seq_len", "vocab_size", "dtype", "mlp"):
        assert getattr(tcfg.model, k) == getattr(hero.model, k), k
    for cfg in [load(ladder.base, r.overrides) for r in ladder.rungs] + [tcfg]:
        m = cfg.model.moe
        assert (cfg.model.mlp, m.n_routed, m.top_k, m.n_shared, cfg.model.n_layers) == ("moe", 16, 2, 1, 12)
        assert cfg.model.head_dim == hero.model.head_dim and cfg.train.lr == tcfg.train.lr
        assert m.bias_update_rate == tcfg.model.moe.bias_update_rate
    N = counts(tcfg.model)["params_active"]
    target_C = training_flops(tcfg.model, tcfg.train.token_budget)
    assert 100e6 < ladder.rungs[-1].N < N and 2 < target_C / ladder.rungs[-1].C < 4
    assert tcfg.train.token_budget / N == pytest.approx(8, rel=0.01)
    steps = tcfg.train.token_budget // (tcfg.train.batch_size * tcfg.model.seq_len)
    rule = ForecastDetector()
    assert steps % tcfg.train.eval_every == 0 and steps * (1 - rule.from_fraction) // tcfg.train.eval_every >= 10
    assert tcfg.experiment.forecast.endswith("gpu-moe-scaling/registration.json")
