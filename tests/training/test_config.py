"""The run config: the demo parses, defaults are typed, and every bad key or value names itself."""

from __future__ import annotations

import dataclasses

import pytest

from test_trainer import ROOT, tiny_config
from training.config import RunConfig, from_dict, load
from training.errors import ConfigError


def test_the_demo_config_is_a_small_moe_with_faults_allowed():
    cfg = load(ROOT / "training/configs/demo.toml")
    assert isinstance(cfg, RunConfig)
    m = cfg.model
    assert m.mlp == "moe" and (m.moe.n_routed, m.moe.top_k, m.moe.n_shared) == (16, 4, 2)
    assert cfg.train.allow_faults is True
    assert cfg.checkpoint.every_steps == 50 and cfg.checkpoint.every_minutes == 1.0
    tokens_per_step = cfg.train.batch_size * m.seq_len
    assert cfg.train.token_budget / tokens_per_step > 20_000  # hours at a few steps per second
    assert cfg.data.stages == ("pretrain", "midtrain") and cfg.data.stage_fractions == (0.8, 0.2)


def test_defaults_fill_every_section_and_sections_are_frozen():
    cfg = from_dict({})
    assert cfg.run.name == "demo" and cfg.train.schedule == "linear" and cfg.sinks.wandb == "off"
    assert isinstance(cfg.train.lr, float) and isinstance(cfg.train.batch_size, int)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.train.lr = 1.0  # type: ignore[misc]
    d = cfg.to_dict()
    assert d["train"]["token_budget"] == cfg.train.token_budget and d["model"]["d_model"] == cfg.model.d_model


def test_an_int_where_a_float_is_expected_is_fine_and_overrides_apply():
    cfg = from_dict({"train": {"lr": 1}}, overrides={"run.steps": 7, "run.seed": 4})
    assert cfg.train.lr == 1.0 and isinstance(cfg.train.lr, float)
    assert (cfg.run.steps, cfg.run.seed) == (7, 4)


@pytest.mark.parametrize("raw,key,message", [
    ({"train": {"batch_size": 0}}, "train.batch_size", "must be a positive integer"),
    ({"train": {"batch_size": 2.5}}, "train.batch_size", "must be an integer"),
    ({"train": {"batch_sise": 8}}, "train.batch_sise", "unknown key"),
    ({"trian": {}}, "trian", "unknown table"),
    ({"train": {"lr": -1.0}}, "train.lr", "must be > 0"),
    ({"train": {"lr": "fast"}}, "train.lr", "must be a number"),
    ({"train": {"schedule": "cosine"}}, "train.schedule", "unknown schedule"),
    ({"train": {"allow_faults": "yes"}}, "train.allow_faults", "must be true or false"),
    ({"train": {"schedule": "wsd", "warmup_ratio": 0.5, "decay_ratio": 0.6}}, "train.decay_ratio", "<= 1"),
    ({"run": {"name": "has space"}}, "run.name", "letters, digits"),
    ({"model": {"n_heads": 3}}, "model.n_heads", "must divide d_model"),
    ({"model": {"mlp": "moe", "moe": {"top_k": 99}}}, "model.moe.top_k", "<= n_routed"),
    ({"data": {"stage_fractions": [0.5, 0.2]}}, "data.stage_fractions", "summing to 1"),
    ({"data": {"stages": ["a"], "stage_fractions": [0.5, 0.5]}}, "data.stage_fractions", "one fraction per stage"),
    ({"data": {"mixture": {"pretrain": {"klingon": 1.0}}}}, "data.mixture.pretrain.klingon", "unknown domain"),
    ({"data": {"mixture": {"posttrain": {"licenses": 1.0}}}}, "data.mixture.posttrain", "unknown stage"),
    ({"data": {"mixture": {"pretrain": {"licenses": -1}}}}, "data.mixture.pretrain.licenses", ">= 0"),
    ({"data": {"tokenizer": "bpe"}}, "data.tokenizer", "unknown tokenizer"),
    ({"checkpoint": {"keep_last": 0}}, "checkpoint.keep_last", "must be a positive integer"),
    ({"sinks": {"wandb": "maybe"}}, "sinks.wandb", "off, offline or online"),
])
def test_a_bad_key_or_value_is_named(raw, key, message):
    with pytest.raises(ConfigError) as e:
        from_dict(raw)
    assert e.value.key == key and message in e.value.message


def test_invalid_toml_and_missing_files_are_config_errors(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[train\nlr = ")
    with pytest.raises(ConfigError, match="invalid TOML"):
        load(bad)
    with pytest.raises(ConfigError, match="no such file"):
        load(tmp_path / "missing.toml")


def test_the_fingerprint_follows_the_model_not_the_optimizer(tmp_path):
    a = load(tiny_config(tmp_path))
    b = load(tiny_config(tmp_path, name="b.toml", train={"lr": 0.5}))
    c = load(tiny_config(tmp_path, name="c.toml", model={"d_model": 64}))
    assert a.fingerprint_hash() == b.fingerprint_hash() != c.fingerprint_hash()


def test_a_custom_mixture_becomes_the_data_modules_stages(tmp_path):
    cfg = load(tiny_config(tmp_path, data={"mixture": {"pretrain": {"licenses": 1.0},
                                                       "midtrain": {"python_stdlib": 1.0}}}))
    dc = cfg.data.to_data_config()
    assert [s.name for s in dc.stages] == ["pretrain", "midtrain"]
    assert dc.stages[0].weights == {"licenses": 1.0} and dc.stages[1].fraction == 0.2
    assert load(tiny_config(tmp_path, name="d.toml")).data.to_data_config().stages is None  # data's presets
