"""`python -m training data prepare`: deterministic token shards with per-domain hashes, user corpora (text, JSONL,
Parquet) counted exactly, the checkpointable shard loader, training from shards with an exact resume, and a resume
refused when a domain's data changed."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from observatory import contract
from training.config import DataSection, from_dict
from training.errors import ConfigError
from training.prepare import prepare
from training.shards import load_prepared
from training.tokenizer import BpeTokenizer

ROOT = Path(__file__).resolve().parents[2]

TXT = ["plain text file: hello world\n"]
JSONL_OK = ["jsonl one", "jsonl two \u00fc\u00df"]
PARQUET_OK = ["parquet row", "\u00faltimo rengl\u00f3n"]


def write_corpus(root: Path, variant: str = "") -> list[str]:
    """A corpus of one .txt, one .jsonl and one .parquet file (text in the `body` field/column); its documents."""
    (root / "sub").mkdir(parents=True, exist_ok=True)
    (root / "a.txt").write_text(TXT[0] + variant)
    lines = [json.dumps({"body": t}) for t in JSONL_OK] + [json.dumps({"text": "wrong field"}), "not json"]
    (root / "sub" / "b.jsonl").write_text("\n".join(lines) + "\n")
    pq.write_table(pa.table({"body": PARQUET_OK + [None], "n": [1, 2, 3]}), root / "c.parquet")
    return [TXT[0] + variant] + JSONL_OK + PARQUET_OK


def run_config(tmp_path: Path, corpus: Path, tokenizer: str = "byte", builtin=("licenses",), **data):
    data = {"builtin_domains": list(builtin), "corpora": {"mine": str(corpus)}, "max_bytes_per_domain": 60_000,
            "text_field": "body", "tokenizer": tokenizer, **data}
    return from_dict({"model": {"vocab_size": 512 if tokenizer == "bpe" else 256}, "data": data,
                      "checkpoint": {"dir": str(tmp_path / "ckpt")}})


def files(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def prepare_cli(config: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "training", "data", "prepare", "--config", str(config), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_preparing_twice_writes_the_same_bytes_and_hashes(tmp_path):
    corpus = tmp_path / "corpus"
    write_corpus(corpus)
    cfg = run_config(tmp_path, corpus, tokenizer="bpe")
    first = prepare(cfg, tmp_path / "one", shard_tokens=4096)
    # The command line (a separate process, its own BPE training) writes the very same files.
    toml = tmp_path / "run.toml"
    toml.write_text(f'[model]\nvocab_size = 512\n[data]\nbuiltin_domains = ["licenses"]\n'
                    f'corpora = {{mine = {json.dumps(str(corpus))}}}\nmax_bytes_per_domain = 60000\n'
                    f'text_field = "body"\ntokenizer = "bpe"\n')
    p = prepare_cli(toml, "--out", str(tmp_path / "two"), "--shard-tokens", "4096")
    assert p.returncode == 0, p.stderr
    assert "prepare [" in p.stderr and "100.0%" in p.stderr  # the progress bar
    assert "data.prepared=" in p.stdout
    one, two = files(tmp_path / "one"), files(tmp_path / "two")
    assert one == two and "tokenizer.json" in one and "index.json" in one
    index = json.loads(one["index.json"])
    assert index == first and [d["name"] for d in index["domains"]] == ["licenses", "mine"]
    lic = index["domains"][0]
    assert len(lic["train_shards"]) > 1 and lic["eval_tokens"] > 0  # several fixed-size shards
    assert all(s["tokens"] == 4096 for s in lic["train_shards"][:-1])
    assert index["dtype"] == "uint16" and index["tokenizer"]["vocab_size"] <= 512
    # Another shuffle seed: the same text and tokenizer, another document order, another content hash.
    other = prepare(cfg, tmp_path / "three", shard_tokens=4096, shuffle_seed=1)
    assert other["domains"][0]["text_sha256"] == lic["text_sha256"] and other["domains"][0]["sha256"] != lic["sha256"]


@pytest.mark.parametrize("tokenizer", ["byte", "bpe"])
def test_txt_jsonl_and_parquet_corpora_tokenize_to_the_expected_counts(tmp_path, tokenizer):
    corpus = tmp_path / "corpus"
    texts = write_corpus(corpus)
    builtin = ("licenses",) if tokenizer == "bpe" else ()  # a BPE needs some text to learn from
    index = prepare(run_config(tmp_path, corpus, tokenizer, builtin=builtin, eval_fraction=0.0), tmp_path / "p")
    mine = index["domains"][-1]
    assert mine["name"] == "mine" and mine["documents"] == 5
    assert any("2 lines without a string 'body' field" in s for s in mine["skipped"])
    assert any("1 rows whose 'body' is not a string" in s for s in mine["skipped"])
    docs = [t.encode() for t in texts]
    if tokenizer == "byte":
        expected = np.frombuffer(b"".join(d + b"\0" for d in docs), np.uint8)
    else:
        tok = BpeTokenizer.load(tmp_path / "p" / "tokenizer.json")
        expected = np.concatenate(tok.encode_each(docs))
    assert mine["tokens"] == mine["train_tokens"] == expected.size
    got = np.concatenate([np.load(tmp_path / "p" / s["file"]) for s in mine["train_shards"]])
    # The same ids, documents in shuffled order: equal as multisets, and each document a contiguous run.
    assert np.array_equal(np.sort(got), np.sort(expected.astype(got.dtype)))
    if tokenizer == "byte":
        assert sorted(bytes(got.astype(np.uint8)).split(b"\0")[:-1]) == sorted(docs)


def test_bad_corpus_input_is_a_config_error_naming_the_domain(tmp_path):
    corpus = tmp_path / "corpus"
    write_corpus(corpus)
    with pytest.raises(ConfigError) as e:
        prepare(run_config(tmp_path, corpus, builtin=(), text_field="content"), tmp_path / "p")
    assert e.value.key == "data.corpora.mine" and "no column 'content'" in e.value.message
    (corpus / "c.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(ConfigError, match="not a readable Parquet file"):
        prepare(run_config(tmp_path, corpus, builtin=()), tmp_path / "p")
    assert not (tmp_path / "p").exists()
    toml = tmp_path / "bad.toml"
    toml.write_text("[data]\ntext_field = \"\"\n")
    p = prepare_cli(toml)
    assert p.returncode == 2 and "data.text_field" in p.stderr


@pytest.fixture
def shards(tmp_path):
    corpus = tmp_path / "corpus"
    write_corpus(corpus)
    cfg = run_config(tmp_path, corpus, builtin=("licenses", "docs_text"), max_bytes_per_domain=20_000)
    prepare(cfg, tmp_path / "p", shard_tokens=1024)
    data = dataclasses.replace(cfg.data, prepared=str(tmp_path / "p"))

    def make(seed=0):
        return load_prepared(data, 16, 8, seed, 10**9, vocab_size=256)

    make.data = data
    return make


def test_the_loader_reads_each_domain_sequentially_and_restores_exactly(shards):
    a = shards()
    assert a.domain_names == ["licenses", "docs_text", "mine"]
    stream = {i: a.domains[i].tokens.read(0, a.domains[i].tokens.size) for i in range(3)}
    seen = {i: 0 for i in range(3)}
    for _ in range(60):  # the tiny `mine` domain wraps many times: every row is still its next window
        b = a.next_batch()
        for row, d in zip(b.tokens_BxL, b.domain_ids_B):
            size = stream[d].size
            if seen[d] + 17 > size:
                seen[d] = 0
            assert np.array_equal(row, stream[d][seen[d]: seen[d] + 17])
            seen[d] += 16
    assert a.epoch[2] > 0 and a.epoch[0] == 0
    state = {k: np.array(v) for k, v in a.state_dict().items()}  # orbax hands back numpy arrays
    expected = [a.next_batch() for _ in range(10)]
    b = shards(seed=99)
    b.load_state_dict(state)
    for x, y in zip(expected, [b.next_batch() for _ in range(10)], strict=True):
        assert np.array_equal(x.tokens_BxL, y.tokens_BxL) and np.array_equal(x.domain_ids_B, y.domain_ids_B)
    # skip(n) leaves the loader where reading those n batches would have.
    c, d = shards(), shards()
    [c.next_batch() for _ in range(7)]
    d.skip(7)
    assert np.array_equal(c.cursor, d.cursor) and c.batch_index == d.batch_index == 7
    assert np.array_equal(c.next_batch().tokens_BxL, d.next_batch().tokens_BxL)
    assert d.tokens_seen == d.tokens_per_batch  # skipped batches are not tokens seen


def test_a_prepared_directory_from_other_settings_or_damaged_is_refused(shards, tmp_path):
    shards()
    data = DataSection(builtin_domains=("licenses",), prepared=str(tmp_path / "p"))
    with pytest.raises(ConfigError, match="prepared from other data settings") as e:
        load_prepared(data, 16, 8, 0, 10**9, vocab_size=256)
    assert e.value.key == "data.prepared" and "builtin_domains" in e.value.message
    shard = tmp_path / "p" / "licenses" / "train-00001.npy"
    shard.write_bytes(shard.read_bytes()[:-8])
    with pytest.raises(ConfigError, match="train-00001.npy is missing or not the shard"):
        load_prepared(shards.data, 16, 8, 0, 10**9, vocab_size=256)
    with pytest.raises(ConfigError, match="no index.json"):
        load_prepared(DataSection(prepared=str(tmp_path / "nowhere")), 16, 8, 0, 10**9, vocab_size=256)


def _losses(records: list[dict]) -> dict[int, float]:
    out = {}
    for r in records:  # the last publication of a step wins (a resume re-runs steps after its checkpoint)
        if r["kind"] == "metrics":
            out[r["step"]] = r["values"][contract.M_LOSS]
    return out


@pytest.mark.slow
def test_training_from_shards_resumes_exactly_and_refuses_changed_data(tmp_path, tiny, trainer_cli, jsonl):
    corpus = tmp_path / "corpus"
    write_corpus(corpus)
    (corpus / "big.txt").write_text("".join(f"line {i} of the user corpus\n" for i in range(400)))
    prepared = tmp_path / "prepared"
    data = {"builtin_domains": ["licenses"], "corpora": {"mine": str(corpus)}, "max_bytes_per_domain": 40_000,
            "text_field": "body", "prepared": str(prepared)}
    cfg = tiny(data=data, checkpoint={"every_steps": 5}, train={"eval_every": 5})
    p = prepare_cli(cfg)
    assert p.returncode == 0, p.stderr
    index = json.loads((prepared / "index.json").read_text())
    # Straight through, 10 steps; and 5 steps, a restart from the checkpoint, 5 more: the same losses.
    straight, split = tmp_path / "straight.jsonl", tmp_path / "split.jsonl"
    p = trainer_cli.run(cfg, "--steps", "10", "--run-id", "straight", "--no-redis", "--metrics-jsonl", str(straight))
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    for steps in ("5", "10"):
        p = trainer_cli.run(cfg, "--steps", steps, "--run-id", "split", "--no-redis", "--metrics-jsonl", str(split))
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    want, got = _losses(jsonl(straight)), _losses(jsonl(split))
    assert sorted(want) == sorted(got) == list(range(1, 11))
    assert got == want  # bit-identical: the loader's cursors came back from the checkpoint
    manifest = next(r for r in jsonl(straight) if r["kind"] == "manifest")["manifest"]
    assert manifest["prepared"] == str(prepared)
    assert {d["name"]: d["sha256"] for d in manifest["domains"]} == {d["name"]: d["sha256"] for d in index["domains"]}
    # The corpus changes and is prepared again: the resume is refused, naming the domain, unless allowed.
    write_corpus(corpus, variant="an edit\n")
    assert prepare_cli(cfg).returncode == 0
    p = trainer_cli.run(cfg, "--steps", "12", "--run-id", "split", "--no-redis")
    out = p.stdout + p.stderr
    assert p.returncode == 2, out[-2000:]
    line = next(x for x in out.splitlines() if "config error" in x)
    assert "data.allow_changed_data" in line and "domain(s) mine changed" in line and "licenses" not in line
    p = trainer_cli.run(cfg, "--steps", "12", "--run-id", "split", "--no-redis", "--set",
                        "data.allow_changed_data=true")
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
