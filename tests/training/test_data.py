"""Data domains and the mixture sampler: real text, exact determinism, proportions, stages, held-out batches."""

from __future__ import annotations

import json

import numpy as np
import pytest

from observatory import contract
from training.config import DEFAULT_DOMAINS, DataSection
from training.errors import ConfigError
from training.sampler import MixtureSampler, build_sampler
from training.sources import TOKENIZER, load_domains

SMALL = DataSection(max_bytes_per_domain=300_000, docstring_source_bytes=400_000)


@pytest.fixture(scope="module")
def domains():
    return load_domains(SMALL)


def stages(*stages: tuple[str, float, dict]) -> DataSection:
    """A data section with these (name, fraction, weights) stages."""
    return DataSection(stages=tuple(n for n, _, _ in stages), stage_fractions=tuple(f for _, f, _ in stages),
                       mixture={n: w for n, _, w in stages})


def make(domains, data=SMALL, seq_len=32, batch_size=8, seed=0, budget=10**9):
    return MixtureSampler(domains, data, seq_len, batch_size, seed, token_budget=budget)


def batches(sampler, n):
    return [sampler.next_batch() for _ in range(n)]


def same(a, b):
    return all(np.array_equal(x.tokens_BxL, y.tokens_BxL) and np.array_equal(x.domain_ids_B, y.domain_ids_B)
               and x.stage == y.stage for x, y in zip(a, b, strict=True))


def test_default_config_loads_four_real_domains():
    # How long this takes is measured by bench/trainer.py (corpus_load_s), not asserted here.
    sampler = build_sampler(DataSection(), seq_len=128, batch_size=4, seed=0, token_budget=10**8)
    m = sampler.manifest()
    json.dumps(m)  # publishable as the contract's manifest message
    assert [d["name"] for d in m["domains"]] == list(DEFAULT_DOMAINS)
    for d in m["domains"]:
        assert d["tokens"] > 50_000, d  # licences are the smallest: ~90 KB
        assert d["sources"] and all(s["bytes"] > 0 and s["files"] > 0 for s in d["sources"])
        # every source names the pinned packages it read, with their versions
        assert all("numpy==" in s["pattern"] and "Django==" in s["pattern"] for s in d["sources"])
    assert m["tokenizer"] == TOKENIZER == {"name": "byte-utf8", "vocab_size": 256, "separator_id": 0}
    assert m["load_seconds"] > 0
    assert [s["name"] for s in m["stages"]] == ["pretrain", "midtrain"]
    assert m["stages"][0]["end_tokens"] == 8 * 10**7 and m["stages"][1]["weights"] != m["stages"][0]["weights"]


def test_the_built_in_text_comes_only_from_pinned_packages_inside_the_environment(monkeypatch):
    import sysconfig

    from training import sources

    roots = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    for kind in ("py", "license", "doc"):
        files = sources._dist_files(kind)
        assert files and all(any(p.startswith(r) for r in roots) for _, p in files), kind
        assert all("==" in label for label, _ in files)  # each file is named by its package's pinned version
        # files a binary wheel generates for its platform (build config, bundled-library licences) are left out
        assert not [x for x, _ in files if x.endswith(("numpy/__config__.py", "numpy-2.4.6.dist-info/licenses/"
                                                                               "LICENSE.txt"))], kind
    # An installed version that differs from the pin would give other text than other machines read: refused.
    pins = {**sources.pinned_versions(), "numpy": "0.0.1"}
    monkeypatch.setattr(sources, "pinned_versions", lambda: pins)
    sources._pinned_dists.cache_clear()
    try:
        with pytest.raises(ConfigError, match="pins 0.0.1"):
            load_domains(DataSection(builtin_domains=("licenses",)))
    finally:
        sources._pinned_dists.cache_clear()


def test_listing_the_built_in_files_reads_each_package_metadata_once(monkeypatch):
    # `dist.metadata` parses METADATA at every access: once per file made every trainer start ~20 s slower.
    import importlib.metadata

    from training import sources

    reads = []
    real = importlib.metadata.PathDistribution.read_text
    monkeypatch.setattr(importlib.metadata.PathDistribution, "read_text",
                        lambda self, name: reads.append(name) or real(self, name))
    sources._pinned_dists()  # cached: the version check is not what is counted
    reads.clear()
    assert sources._dist_files("py")
    assert reads.count("METADATA") <= 2 * len(sources.SOURCE_PACKAGES)


def test_domains_hold_the_text_they_claim(domains):
    text = {d.name: bytes(d.tokens[:200_000]) for d in domains}
    assert b"def " in text["python_source"] and b"import " in text["python_source"]
    assert b"Return" in text["docstrings"] and text["docstrings"] not in text["python_source"]
    assert b"icense" in text["licenses"] and b"copyright" in text["licenses"].lower()
    assert b"the " in text["docs_text"]
    for d in domains:
        assert d.eval_tokens.size > 0 and d.tokens.max() < 256


def test_batches_are_int32_windows_of_their_domain(domains):
    s = make(domains, seq_len=64, batch_size=16)
    b = s.next_batch()
    assert b.tokens_BxL.dtype == np.int32 and b.tokens_BxL.shape == (16, 65)
    assert b.domain_ids_B.dtype == np.int32 and b.domain_ids_B.shape == (16,)
    for row, dom in zip(b.tokens_BxL, b.domain_ids_B):
        assert bytes(row.astype(np.uint8)) in bytes(domains[dom].tokens)


def test_same_seed_same_stream_and_different_seed_differs(domains):
    assert same(batches(make(domains, seed=3), 20), batches(make(domains, seed=3), 20))
    assert not same(batches(make(domains, seed=3), 5), batches(make(domains, seed=4), 5))


def test_state_restore_is_exact_including_a_mixture_override(domains):
    a = make(domains, seed=11)
    batches(a, 7)
    a.set_weights({"licenses": 1.0, "docs_text": 3.0})
    batches(a, 2)
    # orbax hands back numpy arrays; make sure nothing in the state depends on Python objects
    state = {k: np.array(v) for k, v in a.state_dict().items()}
    expected = batches(a, 12)
    b = make(domains, seed=999)
    b.load_state_dict(state)
    assert same(batches(b, 12), expected)
    assert b.weights() == a.weights() and b.tokens_seen == a.tokens_seen
    assert np.array_equal(b.domain_tokens, a.domain_tokens)


def test_skip_jumps_over_batches_without_counting_their_tokens(domains):
    ref = batches(make(domains, seed=5), 8)
    s = make(domains, seed=5)
    batches(s, 3)
    s.skip(4)
    nxt = s.next_batch()
    assert same([nxt], [ref[7]]) and nxt.index == 7
    assert s.tokens_seen == 4 * s.tokens_per_batch


def test_mixture_proportions_follow_the_weights(domains):
    weights = {"python_source": 0.5, "docstrings": 0.1, "licenses": 0.3, "docs_text": 0.1}
    s = make(domains, stages(("only", 1.0, weights)), batch_size=64)
    ids = np.concatenate([s.next_batch().domain_ids_B for _ in range(1000)])
    freq = np.bincount(ids, minlength=4) / ids.size
    for i, name in enumerate(s.domain_names):
        assert abs(freq[i] - weights[name]) < 0.01, (name, freq[i])
    assert s.domain_tokens.sum() == s.tokens_seen


def test_stage_switches_at_80_percent_of_the_budget(domains):
    data = stages(("pretrain", 0.8, {"python_source": 1.0}), ("midtrain", 0.2, {"licenses": 1.0}))
    s = make(domains, data, seq_len=16, batch_size=4)
    s.set_token_budget(10 * s.tokens_per_batch)
    got = batches(s, 12)
    assert [b.stage for b in got] == [0] * 8 + [1] * 4
    assert all((b.domain_ids_B == 0).all() for b in got[:8]) and all((b.domain_ids_B == 2).all() for b in got[8:])
    assert s.metrics()[contract.M_MIX_STAGE] == 1.0 and s.metrics()[contract.mixture_weight("licenses")] == 1.0


def test_default_stages_use_different_mixtures(domains):
    s = make(domains, seq_len=16, batch_size=4, budget=100 * 64)
    w0 = s.weights()
    batches(s, 80)
    assert s.stage == 1 and s.weights() != w0 and s.stage_names == ["pretrain", "midtrain"]


def test_shorter_budget_moves_the_stage_boundary(domains):
    s = make(domains, seq_len=16, batch_size=4, budget=1000 * 64)
    batches(s, 50)
    payload = s.set_token_budget(55 * 64)
    assert payload["stage_before"] == 0 and payload["stage_after"] == 1 and s.next_batch().stage == 1


def test_set_weights_applies_to_the_current_stage_only(domains):
    s = make(domains, seq_len=16, batch_size=4, budget=10 * 64)
    payload = s.set_weights({"docs_text": 1.0})
    assert payload["new"]["docs_text"] == 1.0 and payload["stage"] == "pretrain"
    got = batches(s, 10)
    assert all((b.domain_ids_B == 3).all() for b in got[:8])
    assert not all((b.domain_ids_B == 3).all() for b in got[8:] + batches(s, 20))


@pytest.mark.parametrize("weights,key", [({"nope": 1.0}, "mixture.nope"), ({"licenses": -1.0}, "mixture.licenses"),
                                         ({"licenses": 0.0}, "mixture"), ({"licenses": float("nan")},
                                                                          "mixture.licenses")])
def test_bad_mixture_is_rejected_with_the_key(domains, weights, key):
    s = make(domains)
    with pytest.raises(ConfigError) as e:
        s.set_weights(weights)
    assert e.value.key == key


def test_bad_stages_are_config_errors():
    with pytest.raises(ConfigError, match="summing to 1"):
        stages(("a", 0.5, {"licenses": 1.0}), ("b", 0.4, {"licenses": 1}))
    with pytest.raises(ConfigError) as e:
        stages(("a", 1.0, {"bogus": 1.0}))
    assert e.value.key == "data.mixture.a.bogus"


def test_a_stage_without_a_mixture_takes_its_preset_or_equal_weights(domains):
    s = make(domains, DataSection(stages=("pretrain", "cooldown"), stage_fractions=(0.5, 0.5)), batch_size=4,
             budget=2 * 4 * 32)
    assert s.weights()["python_source"] == pytest.approx(0.45)
    s.next_batch()
    assert s.stage == 1 and set(s.weights().values()) == {0.25}


def test_restoring_a_state_from_another_layout_names_the_mismatch(domains):
    state = make(domains).state_dict()
    other = make(domains[:3], stages(("x", 1.0, {"licenses": 1.0})))
    with pytest.raises(ConfigError, match="stages x"):
        other.load_state_dict(state)


def test_user_corpora_read_txt_jsonl_and_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = tmp_path / "mine"
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_text("alpha text " * 50)
    (root / "sub" / "b.jsonl").write_text(json.dumps({"text": "beta line " * 30}) + "\nnot json\n"
                                          + json.dumps({"other": 1}) + "\n")
    pq.write_table(pa.table({"text": ["gamma row " * 20]}), root / "c.parquet")
    cfg = DataSection(builtin_domains=("licenses",), corpora={"mine": str(root)}, max_bytes_per_domain=50_000)
    doms = load_domains(cfg)
    mine = doms[1]
    assert mine.name == "mine" and mine.documents == 3
    for text in (b"alpha text", b"beta line", b"gamma row"):
        assert text in bytes(mine.tokens) + bytes(mine.eval_tokens)
    assert any("2 lines without" in s for s in mine.skipped)
    s = MixtureSampler(doms, cfg, 16, 4, 0, token_budget=1000)
    assert s.weights()["mine"] > 0  # default stages give user domains a share


def test_missing_user_corpus_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError) as e:
        load_domains(DataSection(builtin_domains=(), corpora={"x": str(tmp_path / "absent")}))
    assert e.value.key == "data.corpora.x"
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="no .txt"):
        load_domains(DataSection(builtin_domains=(), corpora={"x": str(tmp_path / "empty")}))


def test_eval_batches_are_fixed(domains):
    s = make(domains, seq_len=32, batch_size=4)
    a, b = s.eval_batches(), s.eval_batches()
    assert set(a) == set(s.domain_names)
    assert all(np.array_equal(a[k], b[k]) and a[k].shape == (4, 33) for k in a)
