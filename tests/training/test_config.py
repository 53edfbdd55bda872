"""The run config: every shipped config parses, defaults are typed, and every bad key or value names itself."""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

import pytest

from training.config import DataSection, ModelConfig, RunConfig, TrainSection, from_dict, load, parse_override
from training.errors import ConfigError

CONFIGS = Path(__file__).resolve().parents[2] / "training" / "configs"


def test_the_shipped_configs_load():
    assert isinstance(load(CONFIGS / "demo.toml"), RunConfig)
    assert ModelConfig.from_dict(tomllib.loads((CONFIGS / "model_hero.toml").read_text())["model"]).mlp == "moe"


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
    nested = from_dict({"model": {"mlp": "moe", "moe": {"top_k": 2}}}, overrides={"model.moe.n_routed": 8})
    assert (nested.model.moe.n_routed, nested.model.moe.top_k) == (8, 2)


@pytest.mark.parametrize("text,key,value", [
    ("train.lr=3e-4", "train.lr", 3e-4), ("mesh.expert=4", "mesh.expert", 4),
    ("run.name=x", "run.name", "x"), ('run.name="quoted"', "run.name", "quoted"),
    ("train.allow_faults=true", "train.allow_faults", True), ("data.stages=['a', 'b']", "data.stages", ["a", "b"]),
])
def test_an_override_is_a_dotted_key_and_a_toml_value(text, key, value):
    assert parse_override(text) == (key, value)


@pytest.mark.parametrize("overrides,key", [
    ({"train.lr.x": 1}, "train.lr"), ({"model.moe.topk": 1}, "model.moe.topk"), ({"trian.lr": 1}, "trian"),
    ({"train.lr": "fast"}, "train.lr"),
])
def test_a_bad_override_is_named_like_a_bad_file(overrides, key):
    with pytest.raises(ConfigError) as e:
        from_dict({}, overrides)
    assert e.value.key == key


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
    ({"train": {"warmup_ratio": 0.6}}, "train.warmup_ratio", "between 0 and 0.5"),
    ({"train": {"eval_every": -1}}, "train.eval_every", ">= 0"),
    ({"run": {"name": "has space"}}, "run.name", "letters, digits"),
    ({"model": {"n_heads": 3}}, "model.n_heads", "must divide d_model"),
    ({"model": {"mlp": "moe", "moe": {"top_k": 99}}}, "model.moe.top_k", "<= n_routed"),
    ({"data": {"stage_fractions": [0.5, 0.2]}}, "data.stage_fractions", "summing to 1"),
    ({"data": {"stages": ["a"], "stage_fractions": [0.5, 0.5]}}, "data.stage_fractions", "one fraction per stage"),
    ({"data": {"mixture": {"pretrain": {"klingon": 1.0}}}}, "data.mixture.pretrain.klingon", "unknown domain"),
    ({"data": {"mixture": {"posttrain": {"licenses": 1.0}}}}, "data.mixture.posttrain", "unknown stage"),
    ({"data": {"mixture": {"pretrain": {"licenses": -1}}}}, "data.mixture.pretrain.licenses", ">= 0"),
    ({"data": {"tokenizer": "sentencepiece"}}, "data.tokenizer", "unknown tokenizer"),
    ({"data": {"tokenizer": "bpe"}}, "model.vocab_size", "must be >= 512 for a BPE tokenizer"),
    ({"data": {"builtin_domains": ["klingon"]}}, "data.builtin_domains", "unknown domain"),
    ({"data": {"corpora": {"bad name": "/tmp"}}}, "data.corpora.bad name", "domain names"),
    ({"data": {"max_bytes_per_domain": 10}}, "data.max_bytes_per_domain", "at least 1024"),
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


def test_the_fingerprint_follows_the_model_not_the_optimizer(tiny):
    a, b, c = tiny.load(), tiny.load(train={"lr": 0.5}), tiny.load(model={"d_model": 64})
    assert a.fingerprint() == b.fingerprint() != c.fingerprint()


def test_sections_built_in_code_are_checked_like_files():
    with pytest.raises(ConfigError) as e:
        TrainSection(batch_size=0)
    assert e.value.key == "train.batch_size"
    with pytest.raises(ConfigError) as e:
        DataSection(stages=("only",), stage_fractions=(1.0,), mixture={"only": {"bogus": 1.0}})
    assert e.value.key == "data.mixture.only.bogus"
