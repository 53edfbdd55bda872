"""Tokenizers: UTF-8 bytes (vocabulary 256), or a byte-level BPE trained on the run's own corpus (HF tokenizers).

Both turn a list of documents into one id stream with a separator id between documents (id 0: NUL for bytes,
`<|doc|>` for BPE). A BPE tokenizer is trained once per run on the training part of every domain, saved beside
the run's checkpoints (`tokenizer.json`) and loaded from there on every resume, so the ids never change under a
run; its sha256 names it in the manifest.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Sequence

import numpy as np

SEPARATOR_ID = 0
DOC_TOKEN = "<|doc|>"  # BPE's separator, id 0


class ByteTokenizer:
    """UTF-8 bytes as tokens; NUL (stripped from text on load) separates documents."""

    name, vocab_size, separator_id = "byte-utf8", 256, SEPARATOR_ID
    sha256 = hashlib.sha256(b"byte-utf8/256/sep0").hexdigest()[:16]  # names it in a prepared data set's hashes

    def encode_docs(self, docs: Sequence[bytes]) -> np.ndarray:
        sep = bytes([SEPARATOR_ID])
        return np.frombuffer(sep.join(docs) + sep, dtype=np.uint8)

    def encode_each(self, docs: Sequence[bytes]) -> list[np.ndarray]:
        """One id array per document, each ending with the separator."""
        return [np.frombuffer(d + bytes([SEPARATOR_ID]), dtype=np.uint8) for d in docs]

    def describe(self) -> dict:
        return {"name": self.name, "vocab_size": self.vocab_size, "separator_id": self.separator_id}


class BpeTokenizer:
    """A byte-level BPE (GPT-2 style pre-tokenization) of `vocab_size` ids, id 0 the document separator."""

    name, separator_id = "bpe", SEPARATOR_ID

    def __init__(self, tok):
        self._tok = tok
        self.vocab_size = tok.get_vocab_size()
        self.json = tok.to_str()
        self.sha256 = hashlib.sha256(self.json.encode()).hexdigest()[:16]

    @classmethod
    def train(cls, docs: Sequence[bytes], vocab_size: int) -> "BpeTokenizer":
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[DOC_TOKEN], show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tok.train_from_iterator((d.decode("utf-8", errors="replace") for d in docs), trainer=trainer)
        return cls(tok)

    @classmethod
    def load(cls, path: Path) -> "BpeTokenizer":
        from tokenizers import Tokenizer

        return cls(Tokenizer.from_file(str(path)))

    def save(self, path: Path) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(self.json)
        tmp.replace(path)  # never a half-written tokenizer for a resume to read

    @property
    def dtype(self):
        return np.uint16 if self.vocab_size <= 1 << 16 else np.uint32

    def encode_docs(self, docs: Sequence[bytes]) -> np.ndarray:
        parts = self.encode_each(docs)
        return np.concatenate(parts) if parts else np.zeros(0, self.dtype)

    def encode_each(self, docs: Sequence[bytes]) -> list[np.ndarray]:
        """One id array per document, each ending with the separator."""
        encs = self._tok.encode_batch([d.decode("utf-8", errors="replace") for d in docs], add_special_tokens=False)
        return [np.asarray(e.ids + [SEPARATOR_ID], dtype=self.dtype) for e in encs]

    def decode(self, ids) -> str:
        return self._tok.decode([int(i) for i in ids])

    def describe(self) -> dict:
        return {"name": self.name, "vocab_size": self.vocab_size, "separator_id": self.separator_id,
                "sha256": self.sha256}
