"""The BPE tokenizer: trained on the run's corpus, saved beside its checkpoints, reloaded on resume; and resume
refuses a domain whose text changed."""

from __future__ import annotations

import numpy as np
import pytest

from training.config import DataSection
from training.sampler import build_sampler
from training.tokenizer import BpeTokenizer, ByteTokenizer

DOCS = [b"def add(a, b):\n    return a + b\n", b"The licence grants permission to use the software.",
        "caf\u00e9 \u2014 unicode survives".encode()] * 40


def test_bpe_round_trips_text_and_separates_documents(tmp_path):
    tok = BpeTokenizer.train(DOCS, 300)
    assert 257 < tok.vocab_size <= 300
    ids = tok.encode_docs(DOCS[:3])
    assert ids.dtype == np.uint16 and (ids == 0).sum() == 3  # one separator after each document
    pieces = np.split(ids, np.nonzero(ids == 0)[0] + 1)[:3]
    assert [tok.decode(p[:-1]).encode() for p in pieces] == DOCS[:3]
    assert ids.size < sum(len(d) for d in DOCS[:3])  # merges compress
    tok.save(tmp_path / "t.json")
    again = BpeTokenizer.load(tmp_path / "t.json")
    assert again.sha256 == tok.sha256 and np.array_equal(again.encode_docs(DOCS[:3]), ids)
    assert np.array_equal(ByteTokenizer().encode_docs([b"ab"]), np.array([97, 98, 0], np.uint8))


def test_a_run_trains_its_tokenizer_once_and_resumes_with_the_saved_one(tmp_path):
    data = DataSection(builtin_domains=("licenses", "docs_text"), max_bytes_per_domain=60_000, tokenizer="bpe")
    path = tmp_path / "run" / "tokenizer.json"
    with pytest.raises(Exception, match="process 0 trains"):
        build_sampler(data, 32, 4, 0, 10**6, vocab_size=512, tokenizer_file=path, may_train=False)
    first = build_sampler(data, 32, 4, 0, 10**6, vocab_size=512, tokenizer_file=path)
    assert path.exists() and first.manifest()["tokenizer"]["sha256"] == first.tokenizer.sha256
    batch = first.next_batch()
    assert batch.tokens_BxL.max() < 512 and batch.tokens_BxL.dtype == np.int32
    path.write_text(path.read_text())  # a resume reads the file, it does not retrain
    resumed = build_sampler(data, 32, 4, 0, 10**6, vocab_size=512, tokenizer_file=path, may_train=False)
    assert resumed.tokenizer.sha256 == first.tokenizer.sha256
    assert np.array_equal(resumed.next_batch().tokens_BxL, batch.tokens_BxL)


@pytest.mark.slow
def test_resume_refuses_when_a_domains_text_changed_unless_allowed(tmp_path, tiny, trainer_cli):
    corpus = tmp_path / "mine"
    corpus.mkdir()
    (corpus / "a.txt").write_text("alpha beta gamma delta " * 400)
    cfg = tiny(data={"corpora": {"mine": str(corpus)}})
    p = trainer_cli.run(cfg, "--steps", "2", "--run-id", "hashes", "--no-redis")
    assert p.returncode == 0, p.stderr[-2000:]
    (corpus / "a.txt").write_text("alpha beta gamma epsilon " * 400)
    p = trainer_cli.run(cfg, "--steps", "4", "--run-id", "hashes", "--no-redis")
    assert p.returncode == 2 and "mine: checkpoint" in p.stdout + p.stderr  # a config error
    assert "data.allow_changed_data=true" in p.stdout + p.stderr
    p = trainer_cli.run(cfg, "--steps", "4", "--run-id", "hashes", "--no-redis", "--set",
                        "data.allow_changed_data=true")
    assert p.returncode == 0, p.stderr[-2000:]
