"""The data cache (training.data_cache): a warm start reads the tokenizer and the encoded domains instead of
computing them; a changed config or source, or a damaged entry, is computed again."""

from __future__ import annotations

import os

import numpy as np

from training.config import DataSection
from training.sampler import build_sampler

DATA = DataSection(builtin_domains=("licenses", "docs_text"), max_bytes_per_domain=60_000, tokenizer="bpe")


def _build(tmp_path, run: str, data: DataSection = DATA, cache: str = "cache"):
    return build_sampler(data, 32, 4, 0, 10**6, vocab_size=512, tokenizer_file=tmp_path / run / "tokenizer.json",
                         cache_dir=tmp_path / cache)


def test_a_warm_start_new_or_resumed_neither_trains_nor_encodes_and_gives_the_same_batches(tmp_path):
    uncached = build_sampler(DATA, 32, 4, 0, 10**6, vocab_size=512, tokenizer_file=tmp_path / "plain.json")
    cold = _build(tmp_path, "a")
    assert cold.manifest()["data_cache"]["tokenizer_trained"] and cold.cache_info["encoded"]
    warm_new = _build(tmp_path, "b")
    resumed = _build(tmp_path, "a")
    assert warm_new.cache_info["tokenizer"] == "cached" and resumed.cache_info["tokenizer"] == "the run's"
    for s in (warm_new, resumed):
        assert not s.cache_info["encoded"] and not s.cache_info["tokenizer_trained"]
        assert s.tokenizer.sha256 == uncached.tokenizer.sha256
        assert [d.describe() for d in s.domains] == [d.describe() for d in uncached.domains]
    assert (tmp_path / "b" / "tokenizer.json").read_text() == (tmp_path / "a" / "tokenizer.json").read_text()
    for _ in range(3):
        want = uncached.next_batch().tokens_BxL
        assert np.array_equal(warm_new.next_batch().tokens_BxL, want)
        assert np.array_equal(resumed.next_batch().tokens_BxL, want)


def test_a_changed_data_config_or_source_file_encodes_again(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("some user text about routers and experts. " * 200)
    data = DataSection(builtin_domains=("licenses",), corpora={"mine": str(corpus)}, max_bytes_per_domain=60_000,
                       tokenizer="bpe")
    cold = _build(tmp_path, "a", data)
    assert _build(tmp_path, "a", data).cache_info["encoded"] is False
    smaller = DataSection(**{**data.__dict__, "max_bytes_per_domain": 50_000})
    changed = _build(tmp_path, "a", smaller)
    assert changed.cache_info["encoded"] and changed.cache_info["key"] != cold.cache_info["key"]
    (corpus / "a.txt").write_text("other user text about routers and experts! " * 200)
    edited = _build(tmp_path, "c", data)
    assert edited.cache_info["tokenizer_trained"] and edited.cache_info["encoded"]
    assert edited.manifest()["domains"][1]["sha256"] != cold.manifest()["domains"][1]["sha256"]


def test_a_truncated_or_corrupted_cache_file_is_rebuilt_not_fatal(tmp_path):
    _build(tmp_path, "a")
    files = sorted((tmp_path / "cache").iterdir())
    assert [f.name.split("-")[0] for f in files] == ["domains", "tokenizer"]  # no temporary file left behind
    for f in files:
        with open(f, "r+b") as fh:
            fh.truncate(os.path.getsize(f) // 2)
    again = _build(tmp_path, "b")
    assert again.cache_info["tokenizer_trained"] and again.cache_info["encoded"]
    domains = next(f for f in files if f.name.startswith("domains"))
    raw = bytearray(domains.read_bytes())
    raw[len(raw) // 3] ^= 0xFF  # a flipped byte inside the arrays: the zip's CRC catches it
    domains.write_bytes(bytes(raw))
    assert _build(tmp_path, "a").cache_info["encoded"]
    assert _build(tmp_path, "a").cache_info["encoded"] is False


def test_where_the_cache_lives_is_not_part_of_a_registrations_config_hash():
    from training.config import load
    from training.experiment import config_hash

    cfg = load("training/configs/demo.toml")
    assert config_hash(cfg) == config_hash(load("training/configs/demo.toml", {"run.data_cache": ""}))


def test_a_cache_that_cannot_be_written_only_costs_time(tmp_path):
    (tmp_path / "a-file").write_text("not a directory")
    s = _build(tmp_path, "a", cache="a-file/cache")
    assert s.cache_info["encoded"] and s.tokenizer.vocab_size <= 512
